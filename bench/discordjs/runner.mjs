// Runs scenario operations through @discordjs/rest with its default
// settings, for bench/cmd/compare. Protocol, one JSON object per line:
//   argv[2]      the API base, e.g. https://127.0.0.1:1234/api
//   stdout       {"ready":true} once, then {"id":n,"err":null|"message"}
//   stdin        {"id":n,"kind":"send|edit|rename|add_role|remove_role",
//                 "channel","message","guild","user","role","text"}
// The simulator's certificate is trusted through NODE_EXTRA_CA_CERTS.
import { createInterface } from 'node:readline';
import { REST } from '@discordjs/rest';

const rest = new REST({ api: process.argv[2], version: '10' }).setToken('test');

function perform(op) {
  switch (op.kind) {
    case 'send':
      return rest.post(`/channels/${op.channel}/messages`, { body: { content: op.text } });
    case 'edit':
      return rest.patch(`/channels/${op.channel}/messages/${op.message}`, { body: { content: op.text } });
    case 'rename':
      return rest.patch(`/channels/${op.channel}`, { body: { name: op.text } });
    case 'add_role':
      return rest.put(`/guilds/${op.guild}/members/${op.user}/roles/${op.role}`);
    case 'remove_role':
      return rest.delete(`/guilds/${op.guild}/members/${op.user}/roles/${op.role}`);
    default:
      return Promise.reject(new Error(`unknown op ${op.kind}`));
  }
}

const reply = (obj) => process.stdout.write(JSON.stringify(obj) + '\n');

createInterface({ input: process.stdin }).on('line', (line) => {
  const op = JSON.parse(line);
  perform(op).then(
    () => reply({ id: op.id, err: null }),
    (e) => reply({ id: op.id, err: String(e && e.message ? `${e.name}: ${e.message}` : e) }),
  );
}).on('close', () => process.exit(0));

reply({ ready: true });
