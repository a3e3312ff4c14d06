package s3

import (
	"errors"
	"fmt"
	"net/url"
	"time"
)

// Limits of S3 multipart uploads (S3 API reference, "Amazon S3 multipart
// upload limits"): every part but the last is at least 5 MiB, no part is
// larger than 5 GiB, and an upload has at most 10,000 parts.
const (
	MinPartBytes = 5 << 20
	MaxPartBytes = 5 << 30
	MaxParts     = 10000
)

// Defaults of Options.
const (
	DefaultMultipartBytes = 64 << 20
	DefaultMaxAttempts    = 5
	DefaultBaseDelay      = 100 * time.Millisecond
	DefaultMaxBackoff     = 10 * time.Second
	// DefaultRegion is used with an Endpoint when neither Options nor the
	// AWS configuration name a region (MinIO's default region).
	DefaultRegion = "us-east-1"
)

// Verify says how Put checks an object after uploading it.
type Verify int

const (
	// VerifyReadBack (the default) checks the stored object's size and
	// metadata with HeadObject, then reads the whole object back and
	// compares its CRC-32C with the one computed from the bytes sent:
	// it proves what the store holds, at the cost of one GET of the
	// object per upload.
	VerifyReadBack Verify = iota
	// VerifyHead checks only the size and the CRC-32C recorded in the
	// object's metadata (HeadObject), trusting the transport and the
	// store for the bytes (SigV4 payload hashes over HTTP, TLS, and on
	// AWS the SDK's request checksums).
	VerifyHead
)

// Options configure a Store. The zero value with Bucket set is valid after
// Defaults.
type Options struct {
	// Bucket is the S3 bucket holding every object; required.
	Bucket string
	// Region is the bucket's region. Empty means the AWS configuration's
	// (AWS_REGION, the shared config file), else DefaultRegion when an
	// Endpoint is set; without an Endpoint a region must come from one of
	// them.
	Region string
	// Endpoint is the URL of an S3-compatible server (MinIO, Ceph RGW...),
	// e.g. "http://127.0.0.1:9000"; empty means AWS S3. With an endpoint
	// the client uses path-style addressing (http://host/bucket/key) and
	// sends and validates the SDK's checksums only when an operation
	// requires them, since some S3-compatible servers refuse the newer
	// ones (SQ checks its own CRC-32C of every object).
	Endpoint string
	// MultipartBytes is the size above which Put uploads an object in
	// parts, and the size of each part (the last may be smaller; parts
	// grow when an object would need more than MaxParts). Default 64 MiB;
	// from MinPartBytes to MaxPartBytes.
	MultipartBytes int64
	// MaxAttempts is the most attempts of one S3 request (the first plus
	// retries) by the SDK's standard retryer; default 5.
	MaxAttempts int
	// BaseDelay and MaxBackoff shape the retryer's capped exponential
	// backoff with full jitter: before retry i (from 0) it waits a random
	// duration in [0, min(BaseDelay*2^i, MaxBackoff)); throttling errors
	// use a 1 s base. Defaults 100 ms and 10 s.
	BaseDelay  time.Duration
	MaxBackoff time.Duration
	// Verify says how Put checks an upload; default VerifyReadBack.
	Verify Verify
}

// Defaults fills the unset fields of o with their defaults.
func (o *Options) Defaults() {
	if o.MultipartBytes == 0 {
		o.MultipartBytes = DefaultMultipartBytes
	}
	if o.MaxAttempts == 0 {
		o.MaxAttempts = DefaultMaxAttempts
	}
	if o.BaseDelay == 0 {
		o.BaseDelay = DefaultBaseDelay
	}
	if o.MaxBackoff == 0 {
		o.MaxBackoff = DefaultMaxBackoff
	}
}

// Validate returns every problem of o at once, joined, or nil.
func (o *Options) Validate() error {
	var errs []error
	if o.Bucket == "" {
		errs = append(errs, errors.New("tier/s3: no bucket"))
	}
	if o.Endpoint != "" {
		if u, err := url.Parse(o.Endpoint); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			errs = append(errs, fmt.Errorf("tier/s3: endpoint %q is not an http:// or https:// URL", o.Endpoint))
		}
	}
	if o.MultipartBytes < MinPartBytes || o.MultipartBytes > MaxPartBytes {
		errs = append(errs, fmt.Errorf("tier/s3: multipart bytes %d outside [%d, %d] (5 MiB to 5 GiB, S3's part sizes)", o.MultipartBytes, MinPartBytes, MaxPartBytes))
	}
	if o.MaxAttempts < 1 {
		errs = append(errs, fmt.Errorf("tier/s3: max attempts %d below 1", o.MaxAttempts))
	}
	if o.BaseDelay < 0 || o.MaxBackoff < 0 {
		errs = append(errs, fmt.Errorf("tier/s3: negative backoff (base delay %v, max backoff %v)", o.BaseDelay, o.MaxBackoff))
	}
	if o.Verify != VerifyReadBack && o.Verify != VerifyHead {
		errs = append(errs, fmt.Errorf("tier/s3: unknown verify mode %d", o.Verify))
	}
	return errors.Join(errs...)
}
