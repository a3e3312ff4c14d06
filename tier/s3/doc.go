// Package s3 implements tier.ObjectStore on one Amazon S3 bucket, or a
// bucket of an S3-compatible server such as MinIO, with aws-sdk-go-v2
// (service/s3). It is, with cmd, the only SQ package that imports the AWS
// SDK.
//
// # Configuration
//
// Options name the bucket, the region and, for an S3-compatible server, an
// endpoint URL. With an endpoint the client addresses buckets by path
// (http://host:port/bucket/key, as MinIO expects) and computes request
// checksums and validates response checksums only where an operation
// requires them (aws.RequestChecksumCalculationWhenRequired,
// aws.ResponseChecksumValidationWhenRequired): S3-compatible servers refuse
// some of the SDK's newer default checksums. SQ does not depend on them: it
// checks its own CRC-32C of every object. Credentials come from the
// standard AWS chain (environment, shared files, web identity, ECS, EC2
// IMDS); see New.
//
// # Operations (S3 API reference)
//
//	Put     PutObject, or CreateMultipartUpload + UploadPart... + CompleteMultipartUpload
//	        above Options.MultipartBytes (AbortMultipartUpload on failure);
//	        If-None-Match: * for PutOptions.IfAbsent; then HeadObject and,
//	        by default, GetObject to verify
//	Get     GetObject with a Range header
//	Head    HeadObject
//	List    ListObjectsV2, every page
//	Delete  DeleteObject
//	Check   HeadBucket
//
// Each object's CRC-32C travels as user metadata x-amz-meta-sq-crc32c (8
// lowercase hex digits), set at upload and read back by Head. Errors map
// to the tier sentinels: 404 to tier.ErrNotFound (NoSuchBucket to
// tier.ErrBucket instead), 412 and 409 ConditionalRequestConflict to
// tier.ErrExists, 416 to tier.ErrInvalidRange.
//
// # Retries
//
// Every request goes through the SDK's standard retryer, configured by
// Options (MaxAttempts, BaseDelay, MaxBackoff): connection errors, 5xx,
// throttling and timeouts are retried with capped exponential backoff and
// full jitter, the body rewound (Put reads its body through
// io.SectionReader, so every attempt and part is seekable). The SDK's
// client-side retry quota is off. A multipart upload retries each part
// request, not the whole upload; a Put that still fails, or fails its
// verification (tier.ErrCorrupt), is for the caller to retry. A retried
// request may follow an attempt that took effect but whose answer was
// lost: a retried CompleteMultipartUpload answered NoSuchUpload goes on
// to the verification, which tells whether the object is whole, and a
// retried conditional PutObject answered 412 is tier.ErrExists, which
// tier.PutManifest resolves by comparing the stored bytes.
package s3
