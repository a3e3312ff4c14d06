// Package acl is SQ's authorization model: access control lists in
// Kafka's form (KIP-11, and the rules of Kafka's
// kafka.security.authorizer.AclAuthorizer), their textual form, and the
// Authorizer that answers "may this principal do this operation on this
// resource" (docs/security.md, "Authorization").
//
// A Binding allows or denies one principal ("User:NAME", or "User:*" for
// every principal) one Operation on the resources one Pattern names: a
// topic, a consumer group or the cluster, by literal name ("*" is the
// wildcard: every resource of the type) or by name prefix. A request is
// allowed when
//
//   - authorization is off, or
//   - the principal is a super user, or
//   - no deny binding matches it and an allow binding does.
//
// A binding matches a request when its principal is the request's or
// "User:*", its pattern names the request's resource, and its operation
// is the request's or All. An allow binding for Read, Write, Delete or
// Alter also allows Describe (Kafka's implied operations); a deny binding
// implies nothing. Create on the cluster allows creating any topic
// (Kafka's CreateTopics rule). Without a matching binding the answer is
// deny.
//
// The textual form of a binding, used by the CLI and in tests, is
//
//	PRINCIPAL PERMISSION OPERATION RESOURCE
//
// for example
//
//	User:alice allow read topic:orders
//	User:alice allow write topic:orders-*     (prefixed: every topic named orders-...)
//	User:* deny describe group:*              (the wildcard: every group)
//	User:CN=ops,O=shop allow alter cluster
//
// PERMISSION is allow or deny; OPERATION one of read, write, create,
// delete, describe, alter, clusteraction, all; RESOURCE is cluster,
// topic:NAME or group:NAME. A NAME ending in "*" (other than "*" alone)
// is a prefix. A principal or name that is empty or holds a blank, a
// double quote, a backslash or a character that is not printable is
// written as a Go quoted string ("\"User:CN=John Smith\" allow read
// topic:t"); a quoted name is literal unless a "*" follows the closing
// quote, and a literal name that ends in "*" is written quoted
// (group:"jobs*"). Format writes every valid Binding so that Parse reads
// it back to the same Binding (FuzzParse, FuzzFormat).
package acl
