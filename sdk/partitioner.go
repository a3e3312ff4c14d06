package sdk

import "hash/fnv"

// Partitioner chooses the partition of a keyed record. Records without a
// key (Key nil) never reach it: the Producer spreads them itself.
type Partitioner interface {
	// Partition returns a partition in [0, partitions) for key; partitions
	// is at least 1.
	Partition(topic string, key []byte, partitions uint32) uint32
}

// HashPartitioner is the default Partitioner: the 32-bit FNV-1a hash of the
// key modulo the partition count (FNV-1a as specified by Fowler, Noll and Vo,
// https://datatracker.ietf.org/doc/html/draft-eastlake-fnv). The same key
// always maps to the same partition while the partition count stays the
// same, in every SQ Go client. It does not match Kafka's murmur2 placement.
type HashPartitioner struct{}

// Partition implements Partitioner.
func (HashPartitioner) Partition(_ string, key []byte, partitions uint32) uint32 {
	h := fnv.New32a()
	h.Write(key)
	return h.Sum32() % partitions
}

// PartitionerFunc adapts a function to the Partitioner interface.
type PartitionerFunc func(topic string, key []byte, partitions uint32) uint32

// Partition implements Partitioner.
func (f PartitionerFunc) Partition(topic string, key []byte, partitions uint32) uint32 {
	return f(topic, key, partitions)
}
