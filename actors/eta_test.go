package actors

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestStageString(t *testing.T) {
	for s, want := range map[Stage]string{StagePending: "pending", StageQueued: "queued", StageRetrying: "retrying",
		StageSent: "sent", StageDone: "done", Stage(9): "Stage(9)"} {
		assert.Equal(t, want, s.String())
	}
}
