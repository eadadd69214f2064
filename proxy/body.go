package proxy

import (
	"errors"
	"io"
	"net/http"
	"os"
	"strconv"
	"sync/atomic"
	"time"
)

// bodyBudget bounds the bytes of request bodies held at once across every
// request (Config.MaxBuffered).
//
// Invariant: 0 <= used <= max; every take that succeeded is given back
// exactly once, when its request has its answer.
type bodyBudget struct {
	max  int64
	used atomic.Int64
}

// take reserves n bytes; it reports false, reserving nothing, if that
// would go over the bound.
func (b *bodyBudget) take(n int64) bool {
	for {
		u := b.used.Load()
		if u+n > b.max {
			return false
		}
		if b.used.CompareAndSwap(u, u+n) {
			return true
		}
	}
}

// give returns n bytes taken earlier.
func (b *bodyBudget) give(n int64) { b.used.Add(-n) }

// bodyChunk is the least a body's buffer grows by.
const bodyChunk = 64 << 10

// Errors of readBody, each a row of classify.
var (
	errBodyTooLarge = errors.New("proxy: request body over the size limit")
	errBodyBudget   = errors.New("proxy: the request bodies held at once are at their bound")
	errBodyTimeout  = errors.New("proxy: the request body did not arrive in time")
	errBodyRead     = errors.New("proxy: the request body could not be read")
)

// readBody reads r's body into memory before the request takes any place
// in a limiter: at most Config.MaxBody bytes, within Config.BodyTimeout,
// holding its buffer's bytes in the budget as they arrive (a client that
// announces 25 MiB and sends one byte holds 64 KiB). It returns the body
// (nil for none) and the bytes held, to be given back once the request is
// answered; on error nothing is held. r.Body is read to its end or to the
// error, never further.
func (p *Proxy) readBody(w http.ResponseWriter, r *http.Request) (body []byte, held int64, err error) {
	if r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 {
		return nil, 0, nil
	}
	limit := p.cfg.MaxBody
	if r.ContentLength > limit {
		return nil, 0, errBodyTooLarge
	}
	rc := http.NewResponseController(w)
	if rc.SetReadDeadline(time.Now().Add(p.cfg.BodyTimeout)) == nil {
		defer rc.SetReadDeadline(time.Time{})
	}
	want := r.ContentLength // -1: unknown (chunked)
	fail := func(err error) ([]byte, int64, error) {
		p.body.give(held)
		return nil, 0, err
	}
	for {
		if len(body) == cap(body) {
			grow := max(int64(cap(body)), bodyChunk)
			if want >= 0 {
				grow = min(grow, want-int64(len(body))+1) // +1: room to see the end
			}
			grow = min(grow, limit+1-int64(cap(body)))
			if !p.body.take(grow) {
				return fail(errBodyBudget)
			}
			held += grow
			nb := make([]byte, len(body), int64(cap(body))+grow)
			copy(nb, body)
			body = nb
		}
		n, rerr := r.Body.Read(body[len(body):cap(body)])
		body = body[:len(body)+n]
		switch {
		case int64(len(body)) > limit:
			return fail(errBodyTooLarge)
		case rerr == io.EOF:
			return body, held, nil
		case errors.Is(rerr, os.ErrDeadlineExceeded):
			return fail(errBodyTimeout)
		case rerr != nil:
			var mbe *http.MaxBytesError
			if errors.As(rerr, &mbe) {
				return fail(errBodyTooLarge)
			}
			return fail(errBodyRead)
		}
	}
}

// maxBodyMessage is the text of a 413, as Discord words it.
func maxBodyMessage(limit int64) string {
	return "Request entity too large (over " + strconv.FormatInt(limit, 10) + " bytes)"
}
