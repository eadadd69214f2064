package routes_test

import (
	"fmt"

	"github.com/sluicehq/sluice/routes"
)

func ExampleParse() {
	r, err := routes.Parse("delete", "/api/v10/channels/81/messages/99?reason=spam")
	if err != nil {
		panic(err)
	}
	fmt.Println(r.Key())

	w, _ := routes.Parse("POST", "/api/v10/webhooks/1/s3cr3t-t0ken?wait=true")
	fmt.Println(w.Template)
	fmt.Println(w.Redacted())
	fmt.Println(w.PerToken)
	// Output:
	// DELETE /channels/{channel_id}/messages/{message_id} channel_id=81
	// /webhooks/{webhook_id}/{webhook_token}
	// /webhooks/1/{token}
	// true
}

func ExampleBucketKey() {
	a, _ := routes.Parse("POST", "/channels/81/messages")
	b, _ := routes.Parse("PATCH", "/channels/81/messages/99")
	// Suppose Discord answered both with X-RateLimit-Bucket: 80c17d2f.
	fmt.Println(routes.BucketKey("80c17d2f", a.Major) == routes.BucketKey("80c17d2f", b.Major))
	// Output:
	// true
}
