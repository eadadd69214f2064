package harness

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"time"

	"github.com/sluicehq/sluice/sluicetest"
)

// DiscordJSDir finds bench/discordjs: next to this source file when run
// with go run, else under the working directory.
func DiscordJSDir() string {
	if _, file, _, ok := runtime.Caller(0); ok {
		d := filepath.Join(filepath.Dir(file), "..", "..", "discordjs")
		if _, err := os.Stat(filepath.Join(d, "runner.mjs")); err == nil {
			return d
		}
	}
	return "discordjs"
}

// DiscordJS returns the @discordjs/rest client when Node.js and the package
// (npm ci in bench/discordjs) are installed, or nil and the reason it cannot
// run.
func DiscordJS() (*ClientSpec, string) {
	node, err := exec.LookPath("node")
	if err != nil {
		return nil, "node is not installed"
	}
	dir := DiscordJSDir()
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "@discordjs", "rest")); err != nil {
		return nil, "run `npm ci` in " + dir + " first"
	}
	return &ClientSpec{Name: "@discordjs/rest", New: func(srv *sluicetest.Server, cfg Config) (Client, error) {
		return newDiscordJS(node, dir, srv, cfg)
	}}, ""
}

// discordJSClient drives one Node.js process running runner.mjs: each Do
// writes one operation to its stdin and waits for the matching answer.
type discordJSClient struct {
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	cert    string
	writeMu sync.Mutex
	mu      sync.Mutex
	nextID  int
	waiting map[int]chan error
	exited  chan struct{}
}

type jsOp struct {
	ID      int    `json:"id"`
	Kind    string `json:"kind"`
	Channel string `json:"channel,omitempty"`
	Message string `json:"message,omitempty"`
	Guild   string `json:"guild,omitempty"`
	User    string `json:"user,omitempty"`
	Role    string `json:"role,omitempty"`
	Text    string `json:"text,omitempty"`
	Emoji   string `json:"emoji,omitempty"`
	Webhook string `json:"webhook,omitempty"`
	Token   string `json:"token,omitempty"` // the webhook's
}

type jsReply struct {
	Ready bool    `json:"ready"`
	ID    int     `json:"id"`
	Err   *string `json:"err"`
}

func newDiscordJS(node, dir string, srv *sluicetest.Server, cfg Config) (Client, error) {
	cert, err := os.CreateTemp("", "sluice-bench-*.pem")
	if err != nil {
		return nil, err
	}
	_, _ = cert.Write(srv.CertificatePEM())
	cert.Close()
	// @discordjs/rest's global limit is a count per fixed second
	// (globalRequestsPerSecond); it gets the scenario's rate. Scenario 8's
	// scaled global window (50 per 100 ms) becomes 500 per second, which
	// the simulator's sliding 100 ms window does not admit all at once.
	perSecond := int(float64(cfg.GlobalLimit) * float64(time.Second) / float64(cfg.GlobalWindow))
	cmd := exec.Command(node, "runner.mjs", srv.URL+"/api", strconv.Itoa(perSecond))
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "NODE_EXTRA_CA_CERTS="+cert.Name())
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		os.Remove(cert.Name())
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		os.Remove(cert.Name())
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		os.Remove(cert.Name())
		return nil, err
	}
	c := &discordJSClient{cmd: cmd, stdin: stdin, cert: cert.Name(), waiting: map[int]chan error{}, exited: make(chan struct{})}
	ready := make(chan struct{})
	go func() {
		defer close(c.exited)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			var r jsReply
			if json.Unmarshal(sc.Bytes(), &r) != nil {
				continue
			}
			if r.Ready {
				close(ready)
				continue
			}
			c.mu.Lock()
			ch := c.waiting[r.ID]
			delete(c.waiting, r.ID)
			c.mu.Unlock()
			if ch != nil {
				if r.Err != nil {
					ch <- errors.New(*r.Err)
				} else {
					ch <- nil
				}
			}
		}
	}()
	select {
	case <-ready:
		return c, nil
	case <-c.exited:
		c.Close()
		return nil, errors.New("node runner exited before it was ready")
	case <-time.After(15 * time.Second):
		c.Close()
		return nil, errors.New("node runner did not start within 15 s")
	}
}

func (c *discordJSClient) Do(ctx context.Context, op Op) error {
	u := func(v uint64) string { return strconv.FormatUint(v, 10) }
	ch := make(chan error, 1)
	c.mu.Lock()
	c.nextID++
	id := c.nextID
	c.waiting[id] = ch
	c.mu.Unlock()
	line, _ := json.Marshal(jsOp{ID: id, Kind: op.Kind.String(), Channel: u(op.Channel), Message: u(op.Message),
		Guild: u(op.Guild), User: u(op.User), Role: u(op.Role), Text: op.Text, Emoji: op.Emoji,
		Webhook: u(op.Webhook), Token: op.WebhookToken})
	c.writeMu.Lock()
	_, err := c.stdin.Write(append(line, '\n'))
	c.writeMu.Unlock()
	if err != nil {
		return fmt.Errorf("node runner: %w", err)
	}
	select {
	case err := <-ch:
		return err
	case <-c.exited:
		return errors.New("node runner exited")
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (c *discordJSClient) Close() {
	c.stdin.Close() // the runner exits when its stdin closes
	select {
	case <-c.exited:
	case <-time.After(2 * time.Second):
		_ = c.cmd.Process.Kill() // our own child, by its handle
	}
	_ = c.cmd.Wait()
	os.Remove(c.cert)
}
