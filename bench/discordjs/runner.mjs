// Runs scenario operations through @discordjs/rest with its default
// settings (but for the global limit a scenario raises), for
// bench/cmd/compare. Protocol, one JSON object per line:
//   argv[2]      the API base, e.g. https://127.0.0.1:1234/api
//   argv[3]      optional: globalRequestsPerSecond (default 50)
//   stdout       {"ready":true} once, then {"id":n,"err":null|"message"}
//   stdin        {"id":n,"kind":"send|edit|rename|add_role|remove_role|delete|
//                 react|unreact|remove_user_reaction|webhook",
//                 "channel","message","guild","user","role","text","emoji",
//                 "webhook","token"}
// The simulator's certificate is trusted through NODE_EXTRA_CA_CERTS.
import { createInterface } from 'node:readline';
import { REST } from '@discordjs/rest';

const options = { api: process.argv[2], version: '10' };
if (process.argv[3]) options.globalRequestsPerSecond = Number(process.argv[3]);
const rest = new REST(options).setToken('test');

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
    case 'delete':
      return rest.delete(`/channels/${op.channel}/messages/${op.message}`);
    case 'react':
      return rest.put(`/channels/${op.channel}/messages/${op.message}/reactions/${encodeURIComponent(op.emoji)}/@me`);
    case 'unreact':
      return rest.delete(`/channels/${op.channel}/messages/${op.message}/reactions/${encodeURIComponent(op.emoji)}/@me`);
    case 'remove_user_reaction':
      return rest.delete(`/channels/${op.channel}/messages/${op.message}/reactions/${encodeURIComponent(op.emoji)}/${op.user}`);
    case 'webhook':
      // Without the bot's token (auth: false). The REST instance still
      // counts it on its one global limit (globalRequestsPerSecond).
      return rest.post(`/webhooks/${op.webhook}/${encodeURIComponent(op.token)}`, { body: { content: op.text }, auth: false });
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
