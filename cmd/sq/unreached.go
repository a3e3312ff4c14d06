package main

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/seedqueue/sq/sdk"
)

// In a cluster a partition is served by its leader, which need not be the
// node --server names (docs/cluster.md): records whose leader could not be
// reached fail with an *sdk.LeaderConnectionError naming that leader, and
// sq names it too, not the --server node, which may be up.

// leaderUnreachable returns the reason for err when it says that the
// leader of a partition other than the server at addr could not be
// reached: "the leader of orders partition 2, 10.0.0.3:6064, could not be
// reached: ...". ok is false for any other error, and when that leader is
// addr itself.
func leaderUnreachable(addr string, err error) (why error, ok bool) {
	var lce *sdk.LeaderConnectionError
	if !errors.As(err, &lce) || lce.Leader == addr {
		return nil, false
	}
	return explain(err, "the leader of %s partition %d, %s, could not be reached: %v", lce.Topic, lce.Partition, lce.Leader, lce.Err), true
}

// unreachedLeaders gathers the leaders that records could not reach, from
// the *sdk.LeaderConnectionError of each failure (note), with the
// partitions they lead. Safe for concurrent use; the zero value is empty.
type unreachedLeaders struct {
	mu    sync.Mutex
	topic string
	parts map[string]map[uint32]bool // leader address -> partitions
}

// note records the leader err names, if err is or wraps an
// *sdk.LeaderConnectionError.
func (u *unreachedLeaders) note(err error) {
	var lce *sdk.LeaderConnectionError
	if !errors.As(err, &lce) {
		return
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.parts == nil {
		u.parts = map[string]map[uint32]bool{}
	}
	if u.parts[lce.Leader] == nil {
		u.parts[lce.Leader] = map[uint32]bool{}
	}
	u.topic = lce.Topic
	u.parts[lce.Leader][lce.Partition] = true
}

// reason returns why records failed when the leaders they could not reach
// are not only the server at addr: "the leader of orders partition 0,
// 10.0.0.2:6064, could not be reached: ", or, for several, "the leaders of
// orders partitions 0,2 (10.0.0.2:6064) and 1 (10.0.0.3:6064) could not
// be reached: ", then the cause of first (the first failure), to which
// the error unwraps. ok is false when no leader was noted, or only addr
// (the caller then names the server it dialed).
func (u *unreachedLeaders) reason(addr string, first error) (why error, ok bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if len(u.parts) == 0 || len(u.parts) == 1 && u.parts[addr] != nil {
		return nil, false
	}
	// The text goes on with the first failure's own cause, which the
	// message already frames; the error still unwraps to first.
	cause := first
	var lce *sdk.LeaderConnectionError
	if errors.As(first, &lce) {
		cause = lce.Err
	}
	leaders := slices.Sorted(maps.Keys(u.parts))
	if len(leaders) == 1 {
		ps := slices.Sorted(maps.Keys(u.parts[leaders[0]]))
		return explain(first, "the leader of %s %s, %s, could not be reached: %v", u.topic, partitionList(ps), leaders[0], cause), true
	}
	groups := make([]string, len(leaders))
	for i, l := range leaders {
		groups[i] = fmt.Sprintf("%s (%s)", joinPartitions(slices.Sorted(maps.Keys(u.parts[l]))), l)
	}
	return explain(first, "the leaders of %s partitions %s could not be reached: %v", u.topic, strings.Join(groups, " and "), cause), true
}

// partitionList is "partition 3" or "partitions 0,2".
func partitionList(ps []uint32) string {
	if len(ps) == 1 {
		return "partition " + joinPartitions(ps)
	}
	return "partitions " + joinPartitions(ps)
}

// joinPartitions is "0,2,5".
func joinPartitions(ps []uint32) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = strconv.FormatUint(uint64(p), 10)
	}
	return strings.Join(s, ",")
}
