package transport

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type seenFrame struct {
	typ, flags byte
	payload    string
}

func frame(typ, flags byte, stream uint32, payload []byte) []byte {
	var b bytes.Buffer
	b.Write([]byte{byte(len(payload) >> 16), byte(len(payload) >> 8), byte(len(payload)), typ, flags})
	binary.Write(&b, binary.BigEndian, stream)
	b.Write(payload)
	return b.Bytes()
}

func TestFrameScannerAnyChunking(t *testing.T) {
	goAway := make([]byte, 8+5)
	binary.BigEndian.PutUint32(goAway, 0x80000009) // reserved bit set
	binary.BigEndian.PutUint32(goAway[4:], 2)
	copy(goAway[8:], "debug")
	big := bytes.Repeat([]byte{0xAA}, 70000)
	var stream []byte
	stream = append(stream, []byte(http2Preface)...)
	stream = append(stream, frame(frameSettings, 0, 0, nil)...)
	stream = append(stream, frame(0x0, 0, 1, big)...) // DATA
	stream = append(stream, frame(frameRSTStream, 0, 1, []byte{0, 0, 0, 1})...)
	stream = append(stream, frame(framePing, flagAck, 0, []byte("12345678"))...)
	stream = append(stream, frame(frameGoAway, 0, 0, goAway)...)
	want := []seenFrame{
		{frameSettings, 0, ""},
		{0x0, 0, string(big[:8])},
		{frameRSTStream, 0, "\x00\x00\x00\x01"},
		{framePing, flagAck, "12345678"},
		{frameGoAway, 0, string(goAway[:8])},
	}
	for _, chunk := range []int{1, 2, 3, 7, 9, 10, 17, 4096, len(stream)} {
		var got []seenFrame
		s := frameScanner{skip: clientPreface, onFrame: func(typ, flags byte, p []byte) {
			got = append(got, seenFrame{typ, flags, string(p)})
		}}
		for p := stream; len(p) > 0; {
			n := min(chunk, len(p))
			s.scan(p[:n])
			p = p[n:]
		}
		require.Equal(t, want, got, "chunk %d", chunk)
	}

	w := newWatchConn(nil, true, func() {})
	w.rscan.scan(frame(frameGoAway, 0, 0, goAway))
	w.rscan.scan(frame(frameRSTStream, 0, 1, []byte{0, 0, 0, 1}))
	w.wscan.scan([]byte(http2Preface))
	w.wscan.scan(frame(framePing, 0, 0, []byte("abcdefgh")))
	w.wscan.scan(frame(framePing, 0, 0, []byte("abcdefgh")))
	w.rscan.scan(frame(framePing, flagAck, 0, []byte("abcdefgh")))
	o := w.observed()
	assert.Equal(t, &GoAwayError{LastStreamID: 9, Code: 2}, o.goAway)
	assert.True(t, o.rstProtocol)
	assert.Equal(t, 1, o.pingsOutstanding)
}

func TestHasToken(t *testing.T) {
	assert.True(t, hasToken([]string{"close"}, "close"))
	assert.True(t, hasToken([]string{"keep-alive, Close"}, "close"))
	assert.True(t, hasToken([]string{"a", " close "}, "close"))
	assert.False(t, hasToken([]string{"closed"}, "close"))
	assert.False(t, hasToken(nil, "close"))
}
