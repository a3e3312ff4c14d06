package control

import (
	"context"
	"strings"
	"time"

	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/seedqueue/sq/engine"
)

// TracedEngine is an *engine.Engine whose group joins and offset commits
// also make spans ("join <group>", "commit <group>"), for the planes that
// call the engine directly (the Cap'n Proto data plane). Appends and
// fetches are traced by the engine observer already. Without a tracer it
// adds one nil check per call.
type TracedEngine struct {
	*engine.Engine
	s *Server
}

// Traced wraps eng for the data plane.
func (s *Server) Traced(eng *engine.Engine) *TracedEngine { return &TracedEngine{Engine: eng, s: s} }

// JoinGroup is engine.Engine.JoinGroup with a "join" span.
func (t *TracedEngine) JoinGroup(groupID, memberID, clientID string, topics []string, sessionTimeout time.Duration) (engine.JoinResult, error) {
	if t.s.opts.Tracer == nil {
		return t.Engine.JoinGroup(groupID, memberID, clientID, topics, sessionTimeout)
	}
	start := time.Now()
	res, err := t.Engine.JoinGroup(groupID, memberID, clientID, topics, sessionTimeout)
	// Ids the engine refused as invalid UTF-8 still name the span: OTLP
	// carries proto3 strings, so they are made valid first.
	groupID, clientID = strings.ToValidUTF8(groupID, "\uFFFD"), strings.ToValidUTF8(clientID, "\uFFFD")
	_, sp := t.s.opts.Tracer.Start(context.Background(), "join "+groupID, trace.WithTimestamp(start), trace.WithSpanKind(trace.SpanKindConsumer))
	sp.SetAttributes(semconv.MessagingSystemKey.String("sq"), semconv.MessagingOperationName("join"),
		semconv.MessagingConsumerGroupName(groupID), semconv.MessagingClientID(clientID))
	endSpan(sp, err)
	sp.End()
	return res, err
}

// CommitOffsets is engine.Engine.CommitOffsets with a "commit" span.
func (t *TracedEngine) CommitOffsets(group, memberID string, generation int32, offsets []engine.OffsetCommit) ([]engine.OffsetCommit, error) {
	if t.s.opts.Tracer == nil {
		return t.Engine.CommitOffsets(group, memberID, generation, offsets)
	}
	start := time.Now()
	res, err := t.Engine.CommitOffsets(group, memberID, generation, offsets)
	t.s.commitSpan(context.Background(), group, len(offsets), start, err)
	return res, err
}
