package proxy_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/proxy"
	"github.com/sluicehq/sluice/sluicetest"
)

// A proxy in front of the simulator; the bot changes only its base URL.
func Example() {
	api, _ := sluicetest.NewServer(sluicetest.Options{})
	defer api.Close()

	p, err := proxy.New(proxy.Config{
		Upstream: api.APIBase(), // default https://discord.com/api/v10
		Limiter:  sluice.Options{TLSConfig: api.ClientTLSConfig()},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	front := httptest.NewServer(p) // in production: http.Server{Addr: ":8080", Handler: p}
	defer func() {
		front.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = p.Close(ctx)
	}()

	req, _ := http.NewRequest("GET", front.URL+"/api/v10/users/@me", nil)
	req.Header.Set("Authorization", "Bot my-token")
	resp, err := front.Client().Do(req)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	fmt.Println(resp.StatusCode, resp.Header.Get("X-RateLimit-Limit"))
	// Output: 200 5
}
