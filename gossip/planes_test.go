package gossip_test

import (
	"github.com/seedqueue/sq/control"
	"github.com/seedqueue/sq/gossip"
	"github.com/seedqueue/sq/net/dataplane"
)

// A Broker is served by both planes, with every optional interface they
// look for; the engine wrapper the data plane uses is a Storage.
var (
	_ dataplane.Broker           = (*gossip.Broker)(nil)
	_ dataplane.AsyncAppender    = (*gossip.Broker)(nil)
	_ dataplane.GroupBroker      = (*gossip.Broker)(nil)
	_ dataplane.PartitionCreator = (*gossip.Broker)(nil)
	_ control.Engine             = (*gossip.Broker)(nil)
	_ control.GroupAdmin         = (*gossip.Broker)(nil)
	_ control.GroupCoordinator   = (*gossip.Broker)(nil)
	_ control.TopicDeleter       = (*gossip.Broker)(nil)
	_ control.TopicAlterer       = (*gossip.Broker)(nil)
	_ control.TopicPartitioner   = (*gossip.Broker)(nil)
	_ gossip.Storage             = (*control.TracedEngine)(nil)
)
