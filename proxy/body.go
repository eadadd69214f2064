package proxy

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"os"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice"
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

// Chunk sizes of a body's buffer: the first is small and each next one
// twice the last, up to the largest, so a body held in memory is one list
// of chunks with no copy, and a stalled upload holds at most about twice
// what it sent (a 10 KB one holds 12 KiB).
const (
	firstChunk = 4 << 10
	maxChunk   = 64 << 10
)

// Errors of readBody, each a row of classify.
var (
	errBodyTooLarge = errors.New("proxy: request body over the size limit")
	errBodyBudget   = errors.New("proxy: the request bodies held at once are at their bound")
	errBodyTimeout  = errors.New("proxy: the request body did not arrive in time")
	errBodyRead     = errors.New("proxy: the request body could not be read")
)

// requestBody is a body read into memory: chunks, in order.
type requestBody struct {
	chunks [][]byte
	n      int64
}

// reader returns a reader of the whole body; each call a new one, over
// the same chunks (an http.Request's GetBody).
func (b *requestBody) reader() io.ReadCloser {
	rs := make([]io.Reader, len(b.chunks))
	for i, c := range b.chunks {
		rs[i] = bytes.NewReader(c)
	}
	return io.NopCloser(io.MultiReader(rs...))
}

// readBody reads r's body into memory before the request takes any place
// in a limiter: at most Config.MaxBody bytes, within Config.BodyTimeout,
// holding in the budget the chunks it allocates as the bytes arrive (a
// client that announces 25 MiB and sends one byte holds 4 KiB). A JSON
// body (sluice.JSONBody) is counted three times once read: the limiter
// holds two more copies of a message creation's while it adds a nonce.
// It returns the body (nil for none) and the bytes held, to be given back
// once the request is answered; on error nothing is held. r.Body is read
// to its end or to the error, never further.
func (p *Proxy) readBody(w http.ResponseWriter, r *http.Request) (body *requestBody, held int64, err error) {
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
	fail := func(err error) (*requestBody, int64, error) {
		p.body.give(held)
		return nil, 0, err
	}
	body = &requestBody{}
	var cur []byte // the last chunk, filled up to len
	next := int64(firstChunk)
read:
	for {
		if r.ContentLength > 0 && body.n == r.ContentLength {
			break // net/http ends the body there: nothing more to see
		}
		if len(cur) == cap(cur) {
			size := next
			if r.ContentLength > 0 {
				size = min(size, r.ContentLength-body.n)
			}
			size = min(size, limit+1-body.n)
			if !p.body.take(size) {
				return fail(errBodyBudget)
			}
			held += size
			cur = make([]byte, 0, size)
			body.chunks = append(body.chunks, cur)
			next = min(2*next, maxChunk)
		}
		n, rerr := r.Body.Read(cur[len(cur):cap(cur)])
		cur = cur[:len(cur)+n]
		body.chunks[len(body.chunks)-1] = cur
		body.n += int64(n)
		switch {
		case body.n > limit:
			return fail(errBodyTooLarge)
		case rerr == io.EOF:
			if r.ContentLength > 0 && body.n < r.ContentLength {
				return fail(errBodyRead)
			}
			break read
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
	if sluice.JSONBody(r.Header.Get("Content-Type")) {
		if !p.body.take(2 * body.n) {
			return fail(errBodyBudget)
		}
		held += 2 * body.n
	}
	return body, held, nil
}

// maxBodyMessage is the text of a 413, as Discord words it.
func maxBodyMessage(limit int64) string {
	return "Request entity too large (over " + strconv.FormatInt(limit, 10) + " bytes)"
}
