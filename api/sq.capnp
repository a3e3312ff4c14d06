# SQ data-plane schema: the frame exchanged on the Cap'n Proto TCP port
# (default 6064) and the record list carried inside every batch.
#
# Wire layout of one frame on the stream (see docs/architecture.md §4):
#
#   [Cap'n Proto message, standard stream framing, root Frame]
#   [recordsLength raw bytes: zero or more batches, docs/architecture.md §3.2]
#
# Only publish requests (one batch, or many in publishBatches), fetch responses, replica fetch responses and push
# batches carry a records tail; every other frame has none.
@0x9a75c6f4cee24081;

using Go = import "/go.capnp";
$Go.package("api");
$Go.import("github.com/seedqueue/sq/api");

# ---------------------------------------------------------------- records

# Header is one record header: a key (UTF-8 by convention; the server stores
# and returns its bytes unchanged, and gRPC carries it as bytes) and an opaque
# value.
struct Header {
  key   @0 :Text;
  value @1 :Data;
}

# Record is one record inside a batch. Its offset is the batch's baseOffset
# plus offsetDelta; its timestamp (Unix ms) is the batch's firstTimestamp plus
# timestampDelta. A null key means "no key"; an empty value is a valid value.
struct Record {
  offsetDelta    @0 :UInt32;
  timestampDelta @1 :Int64;
  key            @2 :Data;
  value          @3 :Data;
  headers        @4 :List(Header);
}

# RecordSet is the root of the Cap'n Proto message that follows the 64-byte
# batch header.
struct RecordSet {
  records @0 :List(Record);
}

# ---------------------------------------------------------------- frame

# WireError is a failure from the catalog in package api (errors.go). code 0 is
# never sent: a response without an error has error unset.
struct WireError {
  code    @0 :UInt16;
  text    @1 :Text;
  # For OFFSET_OUT_OF_RANGE and commit-range errors: the valid range
  # [rangeStart, rangeEnd]. Zero otherwise.
  rangeStart @2 :UInt64;
  rangeEnd   @3 :UInt64;
  # True when [rangeStart, rangeEnd] is set: [0, 0] is a valid range (an
  # empty partition).
  hasRange   @4 :Bool;
  # For NOT_LEADER: the partition's leader as this node knows it (node id
  # and data-plane host:port). Empty when unknown.
  leaderId      @5 :Text;
  leaderAddress @6 :Text;
}

# Durability is what a publish acknowledgement guarantees.
enum Durability {
  none    @0;  # not yet written (never sent in an acknowledgement)
  written @1;  # written to the log file (page cache); lost on power loss
  synced  @2;  # fdatasync'd: survives power loss
  # replicated: held durably (each under its own sync policy) by every
  # member of the partition's in-sync replica set, at least
  # min.insync.replicas of them (a publish with acks all in a cluster).
  replicated @3;
}

# Acks is how many replicas must hold a published batch before the server
# acknowledges it (the producer setting acks). Outside a cluster both
# acknowledge after the local append under the topic's sync policy.
enum Acks {
  # all (the default): once the partition's high watermark has passed the
  # batch, while the in-sync set has at least min.insync.replicas members;
  # NOT_ENOUGH_REPLICAS (retriable, the batch not exposed) otherwise.
  all    @0;
  # leader: once the leader has appended it; a failover before the
  # followers copy it loses it.
  leader @1;
}

struct HandshakeRequest {
  clientId        @0 :Text;
  # protocolVersion: the lowest version the client speaks. A client that
  # speaks several versions sends the lowest here and the highest in
  # maxProtocolVersion, so that a server that predates the field (which
  # compares protocolVersion alone) still accepts it.
  protocolVersion @1 :UInt16;
  # maxProtocolVersion: the highest version the client speaks; 0 (a client
  # that predates the field): protocolVersion alone. The server answers
  # the highest version both speak (docs/architecture.md §4).
  maxProtocolVersion @2 :UInt16;
}

struct HandshakeResponse {
  # protocolVersion: the version the connection speaks, the highest one
  # both sides speak. 2 and later: publishBatches is served.
  protocolVersion  @0 :UInt16;
  serverVersion    @1 :Text;
  nodeId           @2 :Text;
  maxRecordBytes   @3 :UInt32;  # largest key+value+headers of one record
  maxBatchBytes    @4 :UInt32;  # largest records tail of one frame
  maxFrameBytes    @5 :UInt32;  # largest Cap'n Proto part of one frame
  maxInFlight      @6 :UInt32;  # requests the server serves at once per connection
  error            @7 :WireError;
}

# TopicConfig carries per-topic settings. Zero or empty fields mean "server
# default" in a create request; describe returns the effective values.
struct TopicConfig {
  syncPolicy     @0 :Text;   # "every-batch", "none", or an interval "N"/"Nms"
  segmentBytes   @1 :Int64;
  retentionBytes @2 :Int64;  # -1 unlimited
  retentionMs    @3 :Int64;  # -1 unlimited
  maxRecordBytes @4 :Int32;
  segmentMs      @5 :Int64;
  # minInsyncReplicas is the topic setting min.insync.replicas: the
  # smallest in-sync set with which a publish with acks all is accepted
  # (1 to replicationFactor). 0 in a create request: the server default
  # (2 when the replication factor is 3 or more, else 1).
  minInsyncReplicas @6 :Int32;
  # uncleanLeaderElection is the topic setting
  # unclean.leader.election.enable: when no in-sync replica is alive, elect
  # any alive replica (acknowledged records may be lost). false: the
  # partition stays without a leader until an in-sync replica returns.
  uncleanLeaderElection @7 :Bool;
  # localRetentionMs and localRetentionBytes are the topic settings
  # local.retention.ms and local.retention.bytes (KIP-405): with tiered
  # storage, how long and how much of a partition stays on local disk;
  # retentionMs and retentionBytes still bound the whole log. -2: the same
  # as the whole log's (the default); -1 unlimited (only when the whole
  # log's is unlimited too); else ms or bytes, at most the whole log's.
  # 0 in a create request: the server default. Take effect with tiered
  # storage.
  localRetentionMs    @8 :Int64;
  localRetentionBytes @9 :Int64;
}

struct PartitionInfo {
  partition      @0 :UInt32;
  logStartOffset @1 :UInt64;
  highWatermark  @2 :UInt64;
  logEndOffset   @3 :UInt64;
  sizeBytes      @4 :Int64;
  segmentCount   @5 :UInt32;
  error          @6 :WireError;   # set when the partition is failed (corrupt, I/O error)
  # Cluster placement from the metadata log: the node id of the leader
  # (empty: none), its leader epoch, the replica set (first: preferred
  # leader) and the in-sync replica set. A single node leads every
  # partition itself.
  leader         @7 :Text;
  leaderEpoch    @8 :UInt32;
  replicas       @9 :List(Text);
  isr            @10 :List(Text);
  # The partition's remote log and upload lag; set only when tiered
  # storage is on (docs/tiering.md), from the partition's leader in a
  # cluster.
  remote         @11 :RemoteLogStats;
}

# RemoteLogStats describes a partition's remote log (tiered storage) and
# what is not uploaded yet.
struct RemoteLogStats {
  logStartOffset @0 :UInt64;   # first offset of the remote log; 0 while it holds no segment
  endOffset      @1 :UInt64;   # offset after the last uploaded segment; 0 while none
  segments       @2 :UInt32;   # uploaded segments
  bytes          @3 :Int64;    # their bytes (the batches; indexes not counted)
  lagSegments    @4 :UInt32;   # sealed local segments below the high watermark not uploaded yet
  lagBytes       @5 :Int64;    # their bytes, as of the last upload pass
}

struct TopicInfo {
  name       @0 :Text;
  partitions @1 :UInt32;
  config     @2 :TopicConfig;
  partitionInfos @3 :List(PartitionInfo);
  # topicId is the topic's unique id (16 bytes, a random UUID made at
  # creation, as Kafka's KIP-516): a topic deleted and created again under
  # the same name has a new one. Empty from a server that predates ids.
  topicId    @4 :Data;
  # Number of replicas of each partition (topic setting replication.factor).
  replicationFactor @5 :UInt32;
}

struct MetadataRequest {
  topics @0 :List(Text);   # empty: all topics
}

# BrokerNode is one node of the cluster as clients reach it.
struct BrokerNode {
  nodeId      @0 :Text;
  dataAddress @1 :Text;   # Cap'n Proto data plane host:port
  grpcAddress @2 :Text;   # gRPC control plane host:port
  alive       @3 :Bool;   # alive in the membership (false: suspect or dead)
}

struct MetadataResponse {
  nodeId      @0 :Text;
  dataAddress @1 :Text;
  # Each topic's partitionInfos carry only partition, leader, leaderEpoch,
  # replicas and isr (no offsets or sizes).
  topics      @2 :List(TopicInfo);
  error       @3 :WireError;
  # Every node of the cluster (this node alone when not clustered); a
  # partition's leader is looked up here by node id.
  brokers     @4 :List(BrokerNode);
  clusterId   @5 :Text;
}

struct CreateTopicRequest {
  name       @0 :Text;
  partitions @1 :UInt32;
  config     @2 :TopicConfig;
  # 0: the server's --default-replication-factor.
  replicationFactor @3 :UInt32;
}

struct CreateTopicResponse {
  topic @0 :TopicInfo;
  error @1 :WireError;
}

struct DescribeTopicRequest {
  name @0 :Text;
}

struct DescribeTopicResponse {
  topic @0 :TopicInfo;
  error @1 :WireError;
}

struct ListTopicsRequest {}

struct ListTopicsResponse {
  topics @0 :List(TopicInfo);  # partitionInfos left empty
  error  @1 :WireError;
}

# PublishRequest appends the one batch in the records tail (recordsLength
# bytes) to one partition. The server assigns offsets.
struct PublishRequest {
  topic         @0 :Text;
  partition     @1 :UInt32;
  recordsLength @2 :UInt32;
  # chained: the client sent this publish while an earlier publish to the
  # same partition on this connection was unanswered, and the server must
  # fail it, unwritten, with that publish's error if that publish fails
  # (docs/performance.md, "Pipelined publishes"). false: no such link.
  chained       @3 :Bool;
  # acks: when the server acknowledges the batch (see Acks); all by default.
  acks          @4 :Acks;
}

struct PublishResponse {
  topic         @0 :Text;
  partition     @1 :UInt32;
  baseOffset    @2 :UInt64;   # offset of the batch's first record
  recordCount   @3 :UInt32;
  logAppendTime @4 :Int64;    # Unix ms, broker clock
  durability    @5 :Durability;
  error         @6 :WireError;
  # replicas: how many replicas held the batch when it was acknowledged
  # (the in-sync set's size for durability replicated; 1 otherwise). 0
  # from a server that predates replication: read it as 1.
  replicas      @7 :UInt32;
  # throttleTimeMs: how long the client must wait before its next publish,
  # fetch or subscribe to this node, because the publish took its principal
  # over its produce byte-rate quota (KIP-219); the server holds such
  # requests of this connection back meanwhile. 0: not throttled.
  throttleTimeMs @8 :UInt32;
}

# PublishBatchesEntry is one batch of a PublishBatchesRequest: recordsLength
# bytes of the request's records tail, for one partition, with the chained
# flag of PublishRequest.
struct PublishBatchesEntry {
  topic         @0 :Text;
  partition     @1 :UInt32;
  recordsLength @2 :UInt32;
  chained       @3 :Bool;
}

# PublishBatchesRequest appends the batches of many partitions in one
# request, as Kafka's ProduceRequest does (protocol version 2 and later).
# The records tail is the entries' batches in order, each recordsLength
# bytes; its total is bounded by the handshake's maxBatchBytes, the entries
# by 1024 (api.MaxPublishEntries). Each entry is checked, queued and
# answered as a PublishRequest of its own: one partition's error does not
# fail the others. Two entries of one partition are appended in their
# order, the later one chained to the earlier when it says so.
struct PublishBatchesRequest {
  entries @0 :List(PublishBatchesEntry);
  acks    @1 :Acks;   # for every entry
}

# PublishBatchesResponse answers every entry of the request, in its order,
# with the fields of a PublishResponse (its throttleTimeMs left 0). error
# set: the whole request was refused (then results is empty).
struct PublishBatchesResponse {
  results        @0 :List(PublishResponse);
  throttleTimeMs @1 :UInt32;   # as PublishResponse's, for the whole request
  error          @2 :WireError;
}

# FetchRequest reads batches from offset. The response holds at least one
# whole batch when any exists at or above offset below the high watermark,
# even when it exceeds maxBytes (KIP-74); it may start before offset when
# offset lies inside a batch. maxWaitMs > 0 waits up to that long for data
# (long poll) when none is readable.
struct FetchRequest {
  topic     @0 :Text;
  partition @1 :UInt32;
  offset    @2 :UInt64;
  maxBytes  @3 :UInt32;
  maxWaitMs @4 :UInt32;
  # topicId, when set (16 bytes), must be the topic's current id: a fetch
  # for a topic deleted (and maybe created again) since the client read its
  # metadata gets UNKNOWN_TOPIC_ID. Empty: the topic is found by name.
  topicId   @5 :Data;
}

struct FetchResponse {
  topic          @0 :Text;
  partition      @1 :UInt32;
  highWatermark  @2 :UInt64;
  logStartOffset @3 :UInt64;
  recordsLength  @4 :UInt32;
  error          @5 :WireError;
  # throttleTimeMs: as PublishResponse's, for the fetch byte-rate quota.
  throttleTimeMs @6 :UInt32;
}

struct OffsetCommit {
  topic     @0 :Text;
  partition @1 :UInt32;
  offset    @2 :UInt64;   # next offset the group will read
  metadata  @3 :Text;
  error     @4 :WireError;    # response only
  # topicId (16 bytes) in a request, when set, must be the topic's current id
  # (UNKNOWN_TOPIC_ID otherwise); empty: the topic is found by name. In a
  # response: the id of the topic the offset was committed to.
  topicId   @5 :Data;
}

# CommitOffsetsRequest stores committed offsets for a group. A standalone
# consumer sends generation -1 and an empty memberId.
struct CommitOffsetsRequest {
  group      @0 :Text;
  memberId   @1 :Text;
  generation @2 :Int32;
  offsets    @3 :List(OffsetCommit);
}

struct CommitOffsetsResponse {
  offsets @0 :List(OffsetCommit);  # one per request entry, with its error
  error   @1 :WireError;
}

struct FetchOffsetsRequest {
  group @0 :Text;
  topic @1 :Text;  # empty: every topic the group has offsets for
}

struct FetchOffsetsResponse {
  offsets @0 :List(OffsetCommit);  # only partitions with a committed offset
  error   @1 :WireError;
}

# ---------------------------------------------------------------- storage admin

# DeleteTopicRequest deletes a topic and all its data. The name can be
# reused at once; readers in the middle of a fetch finish safely.
struct DeleteTopicRequest {
  name @0 :Text;
}

struct DeleteTopicResponse {
  error @0 :WireError;
}

# CreatePartitionsRequest grows a topic to totalCount partitions (the new
# total, as Kafka's CreatePartitions, KIP-195). Existing partitions keep
# their records and committed offsets; the new ones start empty.
# INVALID_CONFIG when totalCount is not above the topic's count or is above
# the server's maximum; UNKNOWN_TOPIC for an unknown topic.
struct CreatePartitionsRequest {
  name       @0 :Text;
  totalCount @1 :UInt32;
}

struct CreatePartitionsResponse {
  topic @0 :TopicInfo;   # the topic after the change, with every partition
  error @1 :WireError;
}

# ListOffsetsRequest looks up an offset by broker append time (as Kafka's
# ListOffsets, KIP-79): timestamp -1 is the log end (latest), -2 the log
# start (earliest), otherwise Unix ms: the first offset of the first batch
# appended at or after that time (the log end when there is none).
struct ListOffsetsRequest {
  topic     @0 :Text;
  partition @1 :UInt32;
  timestamp @2 :Int64;
}

struct ListOffsetsResponse {
  offset    @0 :UInt64;
  timestamp @1 :Int64;   # append time of the batch found; -1 when none
  error     @2 :WireError;
}

# ---------------------------------------------------------------- consumer groups (docs/architecture.md §6)

struct TopicPartitions {
  topic      @0 :Text;
  partitions @1 :List(UInt32);
}

# JoinGroupRequest adds a member to a group (memberId empty on the first
# join; the coordinator assigns one) subscribed to topics.
struct JoinGroupRequest {
  group            @0 :Text;
  memberId         @1 :Text;
  clientId         @2 :Text;
  topics           @3 :List(Text);
  sessionTimeoutMs @4 :UInt32;
}

struct JoinGroupResponse {
  memberId            @0 :Text;
  generation          @1 :Int32;
  assignment          @2 :List(TopicPartitions);
  heartbeatIntervalMs @3 :UInt32;
  sessionTimeoutMs    @4 :UInt32;   # the timeout in force, after server bounds
  error               @5 :WireError;
}

# HeartbeatRequest keeps a member alive and reports the partitions it still
# owns; the response carries the member's current assignment.
struct HeartbeatRequest {
  group      @0 :Text;
  memberId   @1 :Text;
  generation @2 :Int32;
  owned      @3 :List(TopicPartitions);
}

struct HeartbeatResponse {
  generation          @0 :Int32;
  assignment          @1 :List(TopicPartitions);
  heartbeatIntervalMs @2 :UInt32;
  error               @3 :WireError;
}

struct LeaveGroupRequest {
  group    @0 :Text;
  memberId @1 :Text;
}

struct LeaveGroupResponse {
  error @0 :WireError;
}

struct GroupSummary {
  group      @0 :Text;
  state      @1 :Text;    # "empty", "stable", "rebalancing"
  members    @2 :UInt32;
  generation @3 :Int32;
}

struct ListGroupsRequest {}

struct ListGroupsResponse {
  groups @0 :List(GroupSummary);
  error  @1 :WireError;
}

struct GroupMember {
  memberId   @0 :Text;
  clientId   @1 :Text;
  assignment @2 :List(TopicPartitions);
}

struct GroupPartitionLag {
  topic           @0 :Text;
  partition       @1 :UInt32;
  committedOffset @2 :Int64;   # -1 when the group has none
  logEndOffset    @3 :UInt64;  # 0, not a value, when lag is -1
  highWatermark   @4 :UInt64;  # 0, not a value, when lag is -1
  lag             @5 :Int64;   # highWatermark - committed (or - log start when none);
                               # -1: the partition's statistics are unknown (its leader is not available)
  memberId        @6 :Text;    # owner in the current generation, empty if none
  topicId         @7 :Data;    # the topic's current id (16 bytes)
}

struct DescribeGroupRequest {
  group @0 :Text;
}

struct DescribeGroupResponse {
  summary @0 :GroupSummary;
  members @1 :List(GroupMember);
  offsets @2 :List(GroupPartitionLag);
  error   @3 :WireError;
}

enum ResetMode {
  earliest  @0;
  latest    @1;
  offset    @2;
  timestamp @3;
}

# ResetOffsetsRequest sets a group's committed offsets of a topic; refused
# while the group has members.
struct ResetOffsetsRequest {
  group @0 :Text;
  topic @1 :Text;
  mode  @2 :ResetMode;
  value @3 :Int64;   # the offset (mode offset) or Unix ms (mode timestamp)
}

struct ResetOffsetsResponse {
  offsets @0 :List(OffsetCommit);
  error   @1 :WireError;
}

struct DeleteGroupRequest {
  group @0 :Text;
}

struct DeleteGroupResponse {
  error @0 :WireError;
}

# ---------------------------------------------------------------- replication (docs/cluster.md)

# ReplicaFetchRequest is a follower's fetch from the leader of a partition
# it replicates. Unlike a FetchRequest it reads up to the leader's log end
# offset (not only below the high watermark), and it reports how far the
# follower's log is, which moves the leader's high watermark and in-sync
# set. The response holds at least one whole batch when any exists at or
# above fetchOffset (KIP-74); maxWaitMs > 0 waits up to that long for one.
struct ReplicaFetchRequest {
  topic         @0 :Text;
  # topicId (16 bytes) must be the topic's current id (UNKNOWN_TOPIC_ID
  # otherwise): a replica never mixes two topics of the same name.
  topicId       @1 :Data;
  partition     @2 :UInt32;
  # followerId: the node id of the fetching replica.
  followerId    @3 :Text;
  # leaderEpoch: the epoch the follower believes current. Older than the
  # leader's: FENCED_LEADER_EPOCH; newer: UNKNOWN_LEADER_EPOCH; a node that
  # does not lead the partition: NOT_LEADER.
  leaderEpoch   @4 :UInt32;
  # fetchOffset: the first offset wanted, the follower's log end offset.
  fetchOffset   @5 :UInt64;
  # durableOffset: the follower's durable log end offset (what its sync
  # policy has made durable; at most fetchOffset).
  durableOffset @6 :UInt64;
  maxBytes      @7 :UInt32;
  maxWaitMs     @8 :UInt32;
}

# ReplicaFetchResponse answers a ReplicaFetchRequest; recordsLength bytes of
# whole batches, as the leader stored them (offsets and leader epochs set),
# follow it.
struct ReplicaFetchResponse {
  topic          @0 :Text;
  partition      @1 :UInt32;
  highWatermark  @2 :UInt64;   # the leader's
  logStartOffset @3 :UInt64;   # the leader's
  leaderEpoch    @4 :UInt32;   # the leader's current epoch
  recordsLength  @5 :UInt32;
  error          @6 :WireError;
}

# OffsetForLeaderEpochRequest asks a partition's leader where leaderEpoch
# ended in its log (KIP-101, KIP-279): a follower of a new epoch sends its
# latest epoch and truncates its log to the answer before it fetches.
struct OffsetForLeaderEpochRequest {
  topic       @0 :Text;
  topicId     @1 :Data;   # 16 bytes: the topic's current id
  partition   @2 :UInt32;
  leaderEpoch @3 :UInt32;
}

# OffsetForLeaderEpochResponse: leaderEpoch is the largest epoch at or
# below the request's in the leader's leader-epoch cache, and endOffset the
# start offset of the next epoch after it (the leader's log end offset when
# it is the latest). UNKNOWN_LEADER_EPOCH when the leader has no epoch at or
# below the request's.
struct OffsetForLeaderEpochResponse {
  leaderEpoch @0 :UInt32;
  endOffset   @1 :UInt64;
  error       @2 :WireError;
}

# InitProducerIdRequest asks for a new idempotent producer id (KIP-98): the
# producer stamps it, its epoch and a per-partition sequence on every batch,
# and the partition leaders drop duplicates of a retried batch.
struct InitProducerIdRequest {}

struct InitProducerIdResponse {
  producerId    @0 :Int64;
  producerEpoch @1 :Int16;
  error         @2 :WireError;
}

# ---------------------------------------------------------------- push subscribe

# SubscribeRequest asks the server to push batches of one partition from
# offset as they become readable, within creditBytes. The server answers
# with any number of PushBatches frames carrying the subscribe's
# correlationId, each followed by a records tail, until unsubscribe, an
# error (sent as a final PushBatches with error set), or the connection
# closes. A push may exceed the remaining credit by at most one batch
# (KIP-74); the server then waits for more credit.
struct SubscribeRequest {
  topic       @0 :Text;
  partition   @1 :UInt32;
  offset      @2 :UInt64;
  creditBytes @3 :UInt32;
  # topicId, when set (16 bytes), must be the topic's current id
  # (UNKNOWN_TOPIC_ID otherwise), and the subscription ends with
  # UNKNOWN_TOPIC_ID when the topic is deleted or replaced. Empty: by name.
  topicId     @4 :Data;
}

struct PushBatches {
  topic          @0 :Text;
  partition      @1 :UInt32;
  highWatermark  @2 :UInt64;
  logStartOffset @3 :UInt64;
  recordsLength  @4 :UInt32;
  error          @5 :WireError;
  # throttleTimeMs: the push took the principal over its fetch byte-rate
  # quota; the subscription's next push waits that long. 0: not throttled.
  throttleTimeMs @6 :UInt32;
}

# GrantCreditRequest adds creditBytes to the subscription opened by the
# subscribe frame with correlationId subscriptionId. It has no response.
struct GrantCreditRequest {
  subscriptionId @0 :UInt64;
  creditBytes    @1 :UInt32;
}

# UnsubscribeRequest ends a subscription; the response is an
# UnsubscribeResponse with the unsubscribe's own correlationId.
struct UnsubscribeRequest {
  subscriptionId @0 :UInt64;
}

struct UnsubscribeResponse {
  error @0 :WireError;
}

# SaslAuthenticateRequest carries one client message of a SASL exchange
# after the handshake (Kafka's SaslHandshake and SaslAuthenticate folded in
# one, KIP-43 and KIP-152): the first names the mechanism (SCRAM-SHA-256,
# RFC 7677) and carries the client-first message, the second the
# client-final one. The server answers it before it reads the next
# request, so requests sent after it see its outcome. On success the
# connection's principal is User:<name> for its lifetime.
struct SaslAuthenticateRequest {
  mechanism @0 :Text;  # read from the first request only
  authBytes @1 :Data;
}

# SaslAuthenticateResponse carries the server's next message; complete is
# set on the last one (server-final, after which the client checks the
# server's signature). An error (AUTHENTICATION_FAILED) ends the exchange;
# a new one may start.
struct SaslAuthenticateResponse {
  authBytes @0 :Data;
  complete  @1 :Bool;
  error     @2 :WireError;
}

# Frame is the root of every data-plane message. A response carries the
# correlationId of its request; responses may arrive in any order.
struct Frame {
  correlationId @0 :UInt64;
  union {
    handshakeRequest      @1  :HandshakeRequest;
    handshakeResponse     @2  :HandshakeResponse;
    metadataRequest       @3  :MetadataRequest;
    metadataResponse      @4  :MetadataResponse;
    createTopicRequest    @5  :CreateTopicRequest;
    createTopicResponse   @6  :CreateTopicResponse;
    describeTopicRequest  @7  :DescribeTopicRequest;
    describeTopicResponse @8  :DescribeTopicResponse;
    listTopicsRequest     @9  :ListTopicsRequest;
    listTopicsResponse    @10 :ListTopicsResponse;
    publishRequest        @11 :PublishRequest;
    publishResponse       @12 :PublishResponse;
    fetchRequest          @13 :FetchRequest;
    fetchResponse         @14 :FetchResponse;
    commitOffsetsRequest  @15 :CommitOffsetsRequest;
    commitOffsetsResponse @16 :CommitOffsetsResponse;
    fetchOffsetsRequest   @17 :FetchOffsetsRequest;
    fetchOffsetsResponse  @18 :FetchOffsetsResponse;
    errorResponse         @19 :WireError;  # a request the server could not parse or route
    deleteTopicRequest    @20 :DeleteTopicRequest;
    deleteTopicResponse   @21 :DeleteTopicResponse;
    listOffsetsRequest    @22 :ListOffsetsRequest;
    listOffsetsResponse   @23 :ListOffsetsResponse;
    joinGroupRequest      @24 :JoinGroupRequest;
    joinGroupResponse     @25 :JoinGroupResponse;
    heartbeatRequest      @26 :HeartbeatRequest;
    heartbeatResponse     @27 :HeartbeatResponse;
    leaveGroupRequest     @28 :LeaveGroupRequest;
    leaveGroupResponse    @29 :LeaveGroupResponse;
    listGroupsRequest     @30 :ListGroupsRequest;
    listGroupsResponse    @31 :ListGroupsResponse;
    describeGroupRequest  @32 :DescribeGroupRequest;
    describeGroupResponse @33 :DescribeGroupResponse;
    resetOffsetsRequest   @34 :ResetOffsetsRequest;
    resetOffsetsResponse  @35 :ResetOffsetsResponse;
    deleteGroupRequest    @36 :DeleteGroupRequest;
    deleteGroupResponse   @37 :DeleteGroupResponse;
    subscribeRequest      @38 :SubscribeRequest;
    pushBatches           @39 :PushBatches;
    grantCreditRequest    @40 :GrantCreditRequest;
    unsubscribeRequest    @41 :UnsubscribeRequest;
    unsubscribeResponse   @42 :UnsubscribeResponse;
    createPartitionsRequest  @43 :CreatePartitionsRequest;
    createPartitionsResponse @44 :CreatePartitionsResponse;
    replicaFetchRequest          @45 :ReplicaFetchRequest;
    replicaFetchResponse         @46 :ReplicaFetchResponse;
    offsetForLeaderEpochRequest  @47 :OffsetForLeaderEpochRequest;
    offsetForLeaderEpochResponse @48 :OffsetForLeaderEpochResponse;
    initProducerIdRequest        @49 :InitProducerIdRequest;
    initProducerIdResponse       @50 :InitProducerIdResponse;
    saslAuthenticateRequest      @51 :SaslAuthenticateRequest;
    saslAuthenticateResponse     @52 :SaslAuthenticateResponse;
    publishBatchesRequest        @53 :PublishBatchesRequest;
    publishBatchesResponse       @54 :PublishBatchesResponse;
  }
}
