package routes

import (
	"fmt"
	"sort"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseSharesTheTemplatesOfDiscordsRoutes(t *testing.T) {
	a, err := Parse("POST", "/api/v10/channels/111111111111111111/messages")
	require.NoError(t, err)
	b, err := Parse("post", "/channels/222222222222222222/messages?x=1")
	require.NoError(t, err)
	require.Equal(t, "POST /channels/{channel_id}/messages", b.TemplateKey())
	assert.Same(t, unsafe.StringData(a.TemplateKey()), unsafe.StringData(b.TemplateKey()),
		"two channels' requests share the route's template")
	assert.Equal(t, "/channels/{channel_id}/messages", b.Template)
	assert.Equal(t, "channel_id=222222222222222222", b.Major)

	// A made-up word is not Discord's: its template is the request's own.
	c, err := Parse("GET", "/channels/333333333333333333/madeup")
	require.NoError(t, err)
	d, err := Parse("GET", "/channels/444444444444444444/madeup")
	require.NoError(t, err)
	require.Equal(t, c.TemplateKey(), d.TemplateKey())
	assert.NotSame(t, unsafe.StringData(c.TemplateKey()), unsafe.StringData(d.TemplateKey()))
	_, shared := (*templates.m.Load())[c.TemplateKey()]
	assert.False(t, shared, "a template with a word that is not Discord's is not kept")

	// Nor one with a method Discord does not serve.
	e, err := Parse("FOO", "/channels/444444444444444444/messages")
	require.NoError(t, err)
	_, shared = (*templates.m.Load())[e.TemplateKey()]
	assert.False(t, shared, "a made-up method is not kept")
}

func TestParseSharesAtMostMaxTemplates(t *testing.T) {
	saved := templates.m.Load()
	t.Cleanup(func() { templates.m.Store(saved) }) // the other tests find room again
	words := make([]string, 0, len(knownWords))
	for w := range knownWords {
		words = append(words, w)
	}
	sort.Strings(words)
	made := map[string]bool{}
	for _, a := range words {
		for _, b := range words {
			if r, err := Parse("GET", "/"+a+"/"+b); err == nil { // webhooks and interactions want ids
				made[r.TemplateKey()] = true
			}
		}
	}
	require.Greater(t, len(made), maxTemplates, "enough templates to fill the table")
	assert.Len(t, *templates.m.Load(), maxTemplates)
	// Past the bound, a template is still right, only not shared.
	r, err := Parse("DELETE", "/channels/555555555555555555/messages/666666666666666666")
	require.NoError(t, err)
	assert.Equal(t, "DELETE /channels/{channel_id}/messages/{message_id}", r.TemplateKey())
	assert.Equal(t, "/channels/{channel_id}/messages/{message_id}", r.Template)
	assert.Equal(t, fmt.Sprint(maxTemplates), fmt.Sprint(len(*templates.m.Load())))
}
