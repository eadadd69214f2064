package main

import (
	"fmt"
	"html"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/sluicehq/sluice/bench/internal/harness"
	"github.com/sluicehq/sluice/sluicetest"
)

// row is one client's line in the figure.
type row struct {
	client  string
	events  []sluicetest.Event // every bucket's answers, by time
	windows [][2]time.Duration // bucket windows [start, end)
	done    time.Duration      // last answer the client received
	limit   int
	window  time.Duration
}

func newRow(r harness.Result) row {
	rw := row{client: r.Client, done: r.Elapsed}
	for _, b := range r.Stats.Buckets {
		rw.limit, rw.window = b.Limit, b.Window.D()
		// A window opens with the first request the bucket admits after the
		// previous window ended, exactly as the simulator counts.
		var end time.Duration = -1
		for _, e := range b.Timeline {
			admitted := e.Status < 400 || e.Scope == "shared" || e.Status == 403
			if admitted && e.At >= end {
				end = e.At + rw.window
				rw.windows = append(rw.windows, [2]time.Duration{e.At, end})
			}
		}
		rw.events = append(rw.events, b.Timeline...)
	}
	sort.SliceStable(rw.events, func(i, j int) bool { return rw.events[i].At < rw.events[j].At })
	return rw
}

const (
	width     = 1000
	left      = 120
	right     = 30
	top       = 78
	rowHeight = 110
	bottom    = 62
)

func render(s harness.Scenario, rows []row) string {
	maxT := s.Ideal
	for _, r := range rows {
		maxT = max(maxT, r.done)
		if n := len(r.events); n > 0 {
			maxT = max(maxT, r.events[n-1].At)
		}
	}
	span := math.Ceil((maxT.Seconds()+0.1)*2) / 2 // whole half seconds
	plotW := float64(width - left - right)
	x := func(d time.Duration) float64 { return left + d.Seconds()/span*plotW }
	height := top + rowHeight*len(rows) + bottom
	title := fmt.Sprintf("Scenario %d: %s", s.ID, s.Setup)
	return renderBody(s, rows, span, plotW, x, height, title)
}

// renderBody draws the figure; render computes the scale.
func renderBody(s harness.Scenario, rows []row, span, plotW float64, x func(time.Duration) float64, height int, title string) string {
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="Helvetica, Arial, sans-serif" font-size="12">`+"\n", width, height, width, height)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", width, height)
	fmt.Fprintf(&b, `<text x="%d" y="22" font-size="14" font-weight="bold">%s</text>`+"\n", left, esc(title))
	fmt.Fprintf(&b, `<text x="%d" y="40" fill="#444">Each tick is one request as the simulator received it (retries included); shaded bands are the bucket's windows (%d per %s).</text>`+"\n",
		left, rows[0].limit, rows[0].window)

	// Legend.
	lx, ly := float64(left), 60.0
	item := func(swatch, label string) {
		b.WriteString(swatch)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f">%s</text>`+"\n", lx+18, ly, esc(label))
		lx += 18 + float64(len(label))*6.4 + 24
	}
	item(fmt.Sprintf(`<rect x="%.1f" y="%.1f" width="4" height="12" fill="#2a9d4b"/>`+"\n", lx+4, ly-10), "2xx")
	item(fmt.Sprintf(`<rect x="%.1f" y="%.1f" width="4" height="12" fill="#d62728"/>`+"\n", lx+4, ly-10), "429")
	item(fmt.Sprintf(`<rect x="%.1f" y="%.1f" width="4" height="12" fill="#ff9f1c"/>`+"\n", lx+4, ly-10), "other status")
	item(fmt.Sprintf(`<rect x="%.1f" y="%.1f" width="14" height="12" fill="#4c8bd6" fill-opacity="0.18" stroke="#4c8bd6" stroke-opacity="0.6"/>`+"\n", lx, ly-10), "bucket window")
	item(fmt.Sprintf(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#333" stroke-width="1.5" stroke-dasharray="4 3"/>`+"\n", lx+7, ly-11, lx+7, ly+3),
		fmt.Sprintf("ideal completion (%.2f s)", s.Ideal.Seconds()))
	item(fmt.Sprintf(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#7b2cbf" stroke-width="2"/>`+"\n", lx+7, ly-11, lx+7, ly+3), "client done (last answer)")

	// Grid and axis.
	axisY := float64(top + rowHeight*len(rows))
	for t := 0.0; t <= span+1e-9; t += 0.5 {
		px := x(time.Duration(t * float64(time.Second)))
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%.1f" stroke="#e6e6e6"/>`+"\n", px, top, px, axisY)
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#333"/>`+"\n", px, axisY, px, axisY+5)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", px, axisY+19, trimFloat(t))
	}
	fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#333"/>`+"\n", left, axisY, float64(left)+plotW, axisY)
	fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle">time since the first request (s)</text>`+"\n", float64(left)+plotW/2, axisY+40)

	for i, r := range rows {
		y0 := float64(top + rowHeight*i)
		mid := y0 + rowHeight/2
		if i > 0 {
			fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#bbb"/>`+"\n", 10, y0, float64(left)+plotW, y0)
		}
		fmt.Fprintf(&b, `<text x="12" y="%.1f" font-weight="bold">%s</text>`+"\n", mid-4, esc(r.client))
		fmt.Fprintf(&b, `<text x="12" y="%.1f" fill="#444">done %.2f s</text>`+"\n", mid+12, r.done.Seconds())
		fmt.Fprintf(&b, `<text x="12" y="%.1f" fill="#444">%.2f× ideal</text>`+"\n", mid+27, float64(r.done)/float64(s.Ideal))
		for _, w := range r.windows {
			fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%d" fill="#4c8bd6" fill-opacity="0.18" stroke="#4c8bd6" stroke-opacity="0.6"/>`+"\n",
				x(w[0]), y0+8, x(w[1])-x(w[0]), rowHeight-16)
		}
		// Ticks: requests closer than 3 px stack upwards.
		const tickH, gap = 11.0, 2.0
		lastX, lane := -100.0, 0
		base := y0 + rowHeight - 12
		for _, e := range r.events {
			px := x(e.At)
			if px-lastX < 3 {
				lane++
			} else {
				lane, lastX = 0, px
			}
			color := "#ff9f1c"
			switch {
			case e.Status >= 200 && e.Status < 300:
				color = "#2a9d4b"
			case e.Status == 429:
				color = "#d62728"
			}
			fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="3" height="%.1f" fill="%s"><title>%s at %.3f s: %d %s (remaining %d)</title></rect>`+"\n",
				px-1.5, base-float64(lane+1)*(tickH+gap)+gap, tickH, color, esc(e.Rule), e.At.Seconds(), e.Status, esc(e.Scope), e.Remaining)
		}
		dx := x(r.done)
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#7b2cbf" stroke-width="2"/>`+"\n", dx, y0+4, dx, y0+rowHeight-4)
	}
	ix := x(s.Ideal)
	fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%.1f" stroke="#333" stroke-width="1.5" stroke-dasharray="4 3"/>`+"\n", ix, top, ix, axisY)
	b.WriteString("</svg>\n")
	return b.String()
}

func esc(s string) string { return html.EscapeString(s) }

func trimFloat(f float64) string {
	s := fmt.Sprintf("%.1f", f)
	return strings.TrimSuffix(s, ".0")
}
