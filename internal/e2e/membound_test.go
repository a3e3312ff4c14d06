package e2e

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seedqueue/sq/api"
)

// The memory bound of the data plane against what peers declare
// (docs/operations.md, "Memory bounds"): whatever 200 connections claim,
// the server's anonymous memory stays under rssAnonLimit.
const (
	rssAnonLimit = 512 << 20
	claimConns   = 200
	claimBytes   = api.DefaultMaxBatchBytes // 16 MiB, the default batch limit
	// budgetBytes and overheadBytes are the server's default request
	// budget and its fixed charge per request (net/dataplane).
	budgetBytes   = 256 << 20
	overheadBytes = 8 << 10
)

// rssAnon returns the RssAnon of process pid in bytes (proc(5)).
func rssAnon(t *testing.T, pid int) int64 {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "RssAnon:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				t.Fatalf("RssAnon line %q: %v", sc.Text(), err)
			}
			return kb << 10
		}
	}
	t.Fatalf("no RssAnon in /proc/%d/status", pid)
	return 0
}

// metricValue scrapes one unlabelled metric from /metrics.
func metricValue(t *testing.T, httpAddr, name string) float64 {
	t.Helper()
	_, body := httpBody(t, "http://"+httpAddr+"/metrics")
	for line := range strings.SplitSeq(body, "\n") {
		if rest, ok := strings.CutPrefix(line, name+" "); ok {
			v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			if err != nil {
				t.Fatalf("metric line %q: %v", line, err)
			}
			return v
		}
	}
	t.Fatalf("no metric %s in /metrics", name)
	return 0
}

// rawFrame marshals one request frame in stream framing.
func rawFrame(t *testing.T, id uint64, build func(api.Frame) error) []byte {
	t.Helper()
	msg, f, err := api.NewFrameMessage(id)
	if err != nil {
		t.Fatal(err)
	}
	if err := build(f); err != nil {
		t.Fatal(err)
	}
	b, err := msg.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestMemoryBoundAgainstClaims runs a real sq-server with the default
// limits (the frame read timeout raised so that it cannot be what frees
// memory) and makes claimConns connections each claim claimBytes without
// sending them, then send all of them but the last byte, then claim a
// whole Cap'n Proto frame. Each time the claims are all at the server
// (the budget's gauges say so) and RssAnon, sampled throughout, stays
// under rssAnonLimit.
func TestMemoryBoundAgainstClaims(t *testing.T) {
	t.Parallel()
	srv := startServer(t, t.TempDir(), "--frame-read-timeout", "10m")
	_, httpAddr := controlAddrs(t, srv)
	sqOK(t, srv.addr, nil, "topic", "create", "m")
	pid := srv.cmd.Process.Pid
	t.Logf("RssAnon at start: %d MiB", rssAnon(t, pid)>>20)

	hs := rawFrame(t, 1, func(f api.Frame) error {
		h, err := f.NewHandshakeRequest()
		if err != nil {
			return err
		}
		h.SetProtocolVersion(api.ProtocolVersion)
		return h.SetClientId("claims")
	})
	pub := rawFrame(t, 2, func(f api.Frame) error {
		p, err := f.NewPublishRequest()
		if err != nil {
			return err
		}
		p.SetRecordsLength(claimBytes)
		return p.SetTopic("m")
	})
	tail := make([]byte, claimBytes-1) // every byte but the last, shared
	granted := budgetBytes / (claimBytes + overheadBytes)
	frameGranted := budgetBytes / (8*api.DefaultMaxFrameBytes + overheadBytes)
	// A stream header declaring a frame of 1 MiB (the default limit).
	frameClaim := make([]byte, 8)
	binary.LittleEndian.PutUint32(frameClaim[4:], (api.DefaultMaxFrameBytes-8)/8)

	cases := []struct {
		name    string
		send    [][]byte // after the handshake
		used    float64  // the budget held once every claim is in
		waiting float64
		// filled is the RssAnon growth that shows the granted
		// connections' bytes have been read (0: nothing to wait for).
		filled int64
	}{
		{"stalled claims", [][]byte{pub}, float64(granted * (claimBytes + overheadBytes)), claimConns - float64(granted), 0},
		{"all but the last byte", [][]byte{pub, tail}, float64(granted * (claimBytes + overheadBytes)), claimConns - float64(granted),
			int64(granted) * (claimBytes - 2<<20)},
		// A frame is charged 8 times its size, for its decoded fields.
		{"stalled frames", [][]byte{frameClaim}, float64(frameGranted * (8*api.DefaultMaxFrameBytes + overheadBytes)), claimConns - float64(frameGranted), 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			base := rssAnon(t, pid)
			peak := base
			sample := func() int64 {
				r := rssAnon(t, pid)
				peak = max(peak, r)
				if r >= rssAnonLimit {
					t.Fatalf("RssAnon %d MiB, limit %d MiB", r>>20, rssAnonLimit>>20)
				}
				return r
			}
			conns := make([]net.Conn, 0, claimConns)
			var writers sync.WaitGroup
			defer func() {
				for _, nc := range conns {
					nc.Close() // ends the writes the server does not read
				}
				writers.Wait()
			}()
			for range claimConns {
				nc := dialRaw(t, srv.addr)
				conns = append(conns, nc)
				writers.Go(func() {
					_, _ = nc.Write(hs)
					for _, b := range tc.send {
						if _, err := nc.Write(b); err != nil {
							return
						}
					}
				})
				sample()
			}
			deadline := time.Now().Add(time.Minute)
			for metricValue(t, httpAddr, "sq_dataplane_inflight_request_bytes") != tc.used ||
				metricValue(t, httpAddr, "sq_dataplane_budget_waiting_connections") != tc.waiting {
				sample()
				if time.Now().After(deadline) {
					t.Fatalf("budget: %v bytes held, %v waiting; want %v and %v",
						metricValue(t, httpAddr, "sq_dataplane_inflight_request_bytes"),
						metricValue(t, httpAddr, "sq_dataplane_budget_waiting_connections"), tc.used, tc.waiting)
				}
				time.Sleep(20 * time.Millisecond) // sampling interval, not a wait for state
			}
			for tc.filled > 0 && sample()-base < tc.filled {
				if time.Now().After(deadline) {
					t.Fatalf("RssAnon grew %d MiB, want the %d granted claims' bytes (%d MiB) read",
						(peak-base)>>20, granted, tc.filled>>20)
				}
				time.Sleep(20 * time.Millisecond) // sampling interval
			}
			t.Logf("%s: RssAnon %d MiB before, peak %d MiB", tc.name, base>>20, peak>>20)
			for _, nc := range conns {
				nc.Close()
			}
			deadline = time.Now().Add(time.Minute)
			for metricValue(t, httpAddr, "sq_dataplane_inflight_request_bytes") != 0 {
				if time.Now().After(deadline) {
					t.Fatal("the budget was not given back after the connections closed")
				}
				time.Sleep(20 * time.Millisecond)
			}
		})
	}
	if out := sqOK(t, srv.addr, nil, "topic", "list"); !strings.Contains(out, "m") {
		t.Fatalf("topic list after the claims:\n%s", out)
	}
}
