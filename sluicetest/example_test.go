package sluicetest_test

import (
	"fmt"
	"net/http"

	"github.com/sluicehq/sluice/sluicetest"
)

// A test starts the simulator, sends requests to it over HTTP/2, and checks
// the client stayed within the limits.
func ExampleNewServer() {
	srv, err := sluicetest.NewServer(sluicetest.Options{})
	if err != nil {
		panic(err)
	}
	defer srv.Close()

	req, _ := http.NewRequest("GET", srv.APIBase()+"/channels/123/messages/456", nil)
	req.Header.Set("Authorization", "Bot my-test-token")
	resp, err := srv.Client().Do(req)
	if err != nil {
		panic(err)
	}
	resp.Body.Close()

	fmt.Println(resp.Proto, resp.StatusCode)
	fmt.Println("limit", resp.Header.Get("X-RateLimit-Limit"), "remaining", resp.Header.Get("X-RateLimit-Remaining"),
		"reset after", resp.Header.Get("X-RateLimit-Reset-After"))
	fmt.Println("violations:", len(srv.Stats().Violations()))
	// Output:
	// HTTP/2.0 200
	// limit 5 remaining 4 reset after 5.000
	// violations: 0
}

// Stats count every answer; Violations explains what the client did wrong.
func ExampleStats_Violations() {
	srv, _ := sluicetest.NewServer(sluicetest.Options{})
	defer srv.Close()
	for i := 0; i < 3; i++ { // the gateway/bot bucket allows 2 per 5 s
		req, _ := http.NewRequest("GET", srv.APIBase()+"/gateway/bot", nil)
		req.Header.Set("Authorization", "Bot my-test-token")
		resp, _ := srv.Client().Do(req)
		resp.Body.Close()
		fmt.Printf("%d scope=%q\n", resp.StatusCode, resp.Header.Get("X-RateLimit-Scope"))
	}
	fmt.Println(srv.Stats().Violations())
	// Output:
	// 200 scope=""
	// 200 scope=""
	// 429 scope="user"
	// [1 user-scope 429s (bucket limits exceeded)]
}
