package engine

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/seedqueue/sq/api"
)

// groupsKept returns the number of groups the coordinator holds.
func groupsKept(e *Engine) int {
	c := e.coord()
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.groups)
}

// A group whose last member leaves or expires, and that has no committed
// offsets, is forgotten: joins under ever new names hold no memory once
// their members are gone. One with committed offsets is kept.
func TestGroupWithoutMembersOrOffsetsIsForgotten(t *testing.T) {
	e, clk := groupEngine(t, 2)
	for i := range 50 {
		g := fmt.Sprintf("leave-%d", i)
		r, err := e.JoinGroup(g, "", "c", []string{"t"}, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if err := e.LeaveGroup(g, r.MemberID); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 50 {
		if _, err := e.JoinGroup(fmt.Sprintf("expire-%d", i), "", "c", []string{"t"}, time.Second); err != nil {
			t.Fatal(err)
		}
	}
	r, err := e.JoinGroup("kept", "", "c", []string{"t"}, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.CommitOffsets("kept", r.MemberID, r.Generation, []OffsetCommit{{Topic: "t", Partition: 0, Offset: 0}}); err != nil {
		t.Fatal(err)
	}
	if n := groupsKept(e); n != 51 {
		t.Fatalf("%d groups kept after 50 left, want the 50 with members and the one with offsets", n)
	}
	clk.Add(2 * time.Second)
	e.coord().expire(clk.Now())
	if n := groupsKept(e); n != 1 {
		t.Fatalf("%d groups kept after every session expired, want only the one with offsets", n)
	}
	if _, err := e.DescribeGroup("kept"); err != nil {
		t.Fatalf("group with offsets: %v", err)
	}
	// A forgotten group is made anew by the next join.
	again, err := e.JoinGroup("leave-0", "", "c", []string{"t"}, time.Second)
	if err != nil || len(again.Assignment["t"]) != 2 {
		t.Fatalf("join of a forgotten group: %+v, %v", again, err)
	}
	if e.coord().members.Load() != 1 {
		t.Fatalf("%d members counted, want 1", e.coord().members.Load())
	}
}

// The members of every group together are bounded: one join beyond the
// bound is refused with THROTTLED (retriable) and creates no group, and a
// member leaving makes room again.
func TestGroupMembersBoundedOverAllGroups(t *testing.T) {
	if testing.Short() {
		t.Skip("joins maxMembers members")
	}
	e, _ := groupEngine(t, 1)
	first := ""
	for i := range maxMembers {
		r, err := e.JoinGroup(fmt.Sprintf("g-%d", i), "", "c", []string{"t"}, time.Minute)
		if err != nil {
			t.Fatalf("join %d: %v", i, err)
		}
		if i == 0 {
			first = r.MemberID
		}
	}
	_, err := e.JoinGroup("one-too-many", "", "c", []string{"t"}, time.Minute)
	if !errors.Is(err, api.ErrThrottled) || !api.AsError(err).Retriable() {
		t.Fatalf("join beyond %d members: %v, want THROTTLED", maxMembers, err)
	}
	if n := groupsKept(e); n != maxMembers {
		t.Fatalf("%d groups kept, want %d: the refused join left one behind", n, maxMembers)
	}
	if err := e.LeaveGroup("g-0", first); err != nil {
		t.Fatal(err)
	}
	if _, err := e.JoinGroup("one-too-many", "", "c", []string{"t"}, time.Minute); err != nil {
		t.Fatalf("join after a member left: %v", err)
	}
}
