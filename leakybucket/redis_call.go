package leakybucket

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"
)

// processor is what go-redis's clients (*redis.Client, *redis.ClusterClient,
// *redis.Ring) offer beyond redis.Scripter: Process sends a command built
// here, so that the script's reply, integers only, is read into an []int64
// without boxing each integer.
type processor interface {
	Process(ctx context.Context, cmd redis.Cmder) error
}

// caller sends a Redis store's scripts, each call within the store's
// Timeout, on the caller's goroutine whenever the client can be made to
// bound every wait by itself:
//
//   - A client with ContextTimeoutEnabled (a *redis.Client,
//     *redis.ClusterClient or *redis.Ring, its socket deadlines not
//     disabled with -2) honours the context's deadline on its sockets, a
//     new connection's handshake included, and is used as it is.
//   - Any other *redis.Client is used through its WithTimeout(Timeout)
//     clone, which shares its connections: every socket read and write (of
//     a command, and of a new connection's handshake) has Timeout as its
//     deadline, whatever the client's ReadTimeout (5 s by default), and
//     the context's deadline bounds the waits for a connection, a dial and
//     a retry's backoff. The clone runs none of the client's hooks
//     (go-redis's WithTimeout does not copy them).
//   - Any other client (a ClusterClient or Ring without
//     ContextTimeoutEnabled, or a Scripter of its own) may not bound a
//     socket's wait by the context, so each call runs on a goroutine of its
//     own and the check stops waiting at the deadline; the goroutine ends
//     when go-redis gives up or the client is closed.
//
// In the first two cases no goroutine and no timer of the store's own is
// spent on a check, only the context's deadline.
type caller struct {
	client  redis.Scripter // the client the calls go to: the user's, or its clone
	proc    processor      // client's Process, when it has one
	timeout time.Duration  // > 0: each call's bound; otherwise the context's only
	bounded bool           // client bounds every wait by itself within timeout
}

func newCaller(client redis.Scripter, timeout time.Duration) caller {
	c := caller{client: client, timeout: timeout}
	if timeout > 0 {
		switch cl := client.(type) {
		case *redis.Client:
			if o := cl.Options(); !o.ContextTimeoutEnabled || o.ReadTimeout < 0 || o.WriteTimeout < 0 {
				c.client = cl.WithTimeout(timeout)
			}
			c.bounded = true
		case *redis.ClusterClient:
			o := cl.Options()
			c.bounded = o.ContextTimeoutEnabled && o.ReadTimeout >= 0 && o.WriteTimeout >= 0
		case *redis.Ring:
			o := cl.Options()
			c.bounded = o.ContextTimeoutEnabled && o.ReadTimeout >= 0 && o.WriteTimeout >= 0
		}
	}
	c.proc, _ = c.client.(processor)
	return c
}

// scriptCall is one run of a script: the arguments of its EVALSHA,
// "evalsha", the script's SHA1, the number of keys, the keys, then ARGV.
type scriptCall struct {
	script *redis.Script
	src    string // the script's source, for EVAL when Redis lost it
	args   []any
}

// newScriptCall starts the arguments of a run of script with nkeys keys and
// room for nargs more (the keys and ARGV), to be appended to args.
func newScriptCall(script *redis.Script, src string, nkeys, nargs int) scriptCall {
	args := make([]any, 3, 3+nargs)
	args[0], args[1], args[2] = "evalsha", script.Hash(), nkeys
	return scriptCall{script: script, src: src, args: args}
}

// run runs the script within c.timeout: see caller. A failure past the
// deadline is context.DeadlineExceeded or the client's timeout error.
func (c *caller) run(ctx context.Context, sc scriptCall) ([]int64, error) {
	switch {
	case c.timeout <= 0:
		return c.send(ctx, sc)
	case c.bounded:
		ctx, cancel := context.WithTimeout(ctx, c.timeout)
		defer cancel()
		return c.send(ctx, sc)
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	type answer struct {
		reply []int64
		err   error
	}
	done := make(chan answer, 1)
	go func() {
		reply, err := c.send(ctx, sc)
		done <- answer{reply, err}
	}()
	select {
	case a := <-done:
		return a.reply, a.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// send sends the script with EVALSHA, and again with EVAL if Redis does not
// hold it (a restarted Redis, SCRIPT FLUSH).
func (c *caller) send(ctx context.Context, sc scriptCall) ([]int64, error) {
	if c.proc == nil {
		nkeys := sc.args[2].(int)
		keys := make([]string, nkeys)
		for i := range keys {
			keys[i] = sc.args[3+i].(string)
		}
		return sc.script.Run(ctx, c.client, keys, sc.args[3+nkeys:]...).Int64Slice()
	}
	cmd := redis.NewIntSliceCmd(ctx, sc.args...)
	err := c.proc.Process(ctx, cmd)
	if err != nil && (errors.Is(err, redis.ErrNoScript) || redis.HasErrorPrefix(err, "NOSCRIPT")) {
		args := append([]any{"eval", sc.src}, sc.args[2:]...)
		cmd = redis.NewIntSliceCmd(ctx, args...)
		err = c.proc.Process(ctx, cmd)
	}
	if err != nil {
		return nil, err
	}
	return cmd.Val(), nil
}
