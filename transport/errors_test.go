package transport

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
)

// opErr is err as a socket read returns it.
func opErr(err error) error {
	return &net.OpError{Op: "read", Net: "tcp", Err: &os.SyscallError{Syscall: "read", Err: err}}
}

// errName names a table case by its error.
func errName(err error) string {
	if err == nil {
		return "nil"
	}
	return err.Error()
}

func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want Failure
	}{
		{nil, None},
		{&DialError{Addr: "x:443", Err: errors.New("refused")}, NotSent},
		{&ConnectionDiedError{Reason: io.ErrUnexpectedEOF, Sent: false}, NotSent},
		{&ConnectionDiedError{Reason: io.ErrUnexpectedEOF, Sent: true}, ConnectionDied},
		{fmt.Errorf("wrapped: %w", &ConnectionDiedError{Sent: true}), ConnectionDied},
		{context.Canceled, Canceled},
		{context.DeadlineExceeded, Canceled},
		{fmt.Errorf("x: %w", context.Canceled), Canceled},
		{errors.New("net/http: request canceled"), Canceled},
		{errors.New("http2: client conn not usable"), NotSent},
		{errors.New("http2: client conn could not be established"), NotSent},
		{errors.New("http2: Transport received Server's graceful shutdown GOAWAY"), NotSent},
		{errors.New("http2: Transport received GOAWAY from server ErrCode:ENHANCE_YOUR_CALM"), NotSent},
		{errors.New("stream error: stream ID 3; REFUSED_STREAM; received from peer"), NotSent},
		{errors.New("stream error: stream ID 3; PROTOCOL_ERROR; received from peer"), Other},
		{io.ErrUnexpectedEOF, ConnectionDied},
		{io.EOF, ConnectionDied},
		{net.ErrClosed, ConnectionDied},
		{opErr(syscall.ECONNRESET), ConnectionDied},
		{opErr(syscall.EPIPE), ConnectionDied},
		{errors.New("http2: server sent GOAWAY and closed the connection; LastStreamID=1, ErrCode=NO_ERROR, debug=\"\""), ConnectionDied},
		{errors.New("http2: client connection lost"), ConnectionDied},
		{errors.New("http2: client connection force closed via ClientConn.Close"), ConnectionDied},
		{errors.New("http2: client conn is closed"), ConnectionDied},
		{errors.New("connection error: PROTOCOL_ERROR"), ConnectionDied},
		{&GoAwayError{LastStreamID: 1}, ConnectionDied},
		{ErrPingTimeout, ConnectionDied},
		{ErrServerClosed, ConnectionDied},
		{errors.New("http: invalid header field name"), Other},
		{errors.New("boom"), Other},
	} {
		assert.Equal(t, tc.want, Classify(tc.err), errName(tc.err))
	}
}

// TestPeerClosed: only the server's end of a connection bounds when a
// request sent on it could still reach the server.
func TestPeerClosed(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{io.ErrUnexpectedEOF, true},
		{io.EOF, true},
		{ErrServerClosed, true},
		{opErr(syscall.ECONNRESET), true},
		{opErr(syscall.EPIPE), true},
		{&ConnectionDiedError{Reason: io.ErrUnexpectedEOF, Sent: true}, true},
		{fmt.Errorf("wrapped: %w", &ConnectionDiedError{Reason: opErr(syscall.ECONNRESET), Sent: true}), true},
		{&GoAwayError{LastStreamID: 1}, true},
		{errors.New("http2: server sent GOAWAY and closed the connection; LastStreamID=1, ErrCode=NO_ERROR, debug=\"\""), true},
		// This side's doing: the request may still be on its way.
		{context.Canceled, false},
		{context.DeadlineExceeded, false},
		{errors.New("net/http: request canceled"), false},
		{ErrPingTimeout, false},
		{&ConnectionDiedError{Reason: ErrPingTimeout, Sent: true}, false},
		{ErrClosed, false},
		{net.ErrClosed, false},
		{errors.New("http2: client connection lost"), false},
		{errors.New("http2: client connection force closed via ClientConn.Close"), false},
		{errors.New("http2: client conn is closed"), false},
		{errors.New("boom"), false},
	} {
		assert.Equal(t, tc.want, PeerClosed(tc.err), errName(tc.err))
	}
}

func TestFailureHelpers(t *testing.T) {
	assert.Equal(t, "ConnectionDied", ConnectionDied.String())
	assert.Equal(t, "Failure(?)", Failure(99).String())
}

func TestErrorTypes(t *testing.T) {
	e := &ConnectionDiedError{Reason: io.ErrUnexpectedEOF, Sent: true}
	assert.Equal(t, "transport: connection died: unexpected EOF", e.Error())
	assert.ErrorIs(t, e, ErrConnectionDied)
	assert.ErrorIs(t, e, io.ErrUnexpectedEOF)
	e = &ConnectionDiedError{Reason: ErrClosed}
	assert.Equal(t, "transport: connection died (request not sent): transport: connection closed by Close", e.Error())
	assert.ErrorIs(t, e, ErrClosed)

	d := &DialError{Addr: "discord.com:443", Err: context.DeadlineExceeded}
	assert.Equal(t, "transport: dial discord.com:443: context deadline exceeded", d.Error())
	assert.ErrorIs(t, d, context.DeadlineExceeded)

	g := &GoAwayError{LastStreamID: 7, Code: 0xb}
	assert.Equal(t, "transport: server sent GOAWAY (last stream 7, ENHANCE_YOUR_CALM)", g.Error())
	assert.ErrorIs(t, g, ErrGoAway)
	assert.Contains(t, (&GoAwayError{Code: 0x99}).Error(), "error code 0x99")

	assert.ErrorIs(t, ErrServerClosed, io.ErrUnexpectedEOF)
}
