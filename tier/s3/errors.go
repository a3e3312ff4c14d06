package s3

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"

	"github.com/aws/smithy-go"

	"github.com/seedqueue/sq/tier"
)

// statusCoder is implemented by the SDK's HTTP response errors.
type statusCoder interface{ HTTPStatusCode() int }

// httpStatus returns the HTTP status of err's response, or 0 if err did
// not come from a response.
func httpStatus(err error) int {
	var sc statusCoder
	if errors.As(err, &sc) {
		return sc.HTTPStatusCode()
	}
	return 0
}

// errorCode returns the S3 error code of err ("NoSuchKey"), or "".
func errorCode(err error) string {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return ae.ErrorCode()
	}
	return ""
}

// mapErr wraps err from operation op on key, adding the tier class it
// belongs to: ErrNotFound (404 for a key), ErrBucket (no such bucket),
// ErrExists (412 Precondition Failed, 409 ConditionalRequestConflict),
// ErrInvalidRange (416). nil stays nil.
func (s *Store) mapErr(op, key string, err error) error {
	if err == nil {
		return nil
	}
	code := errorCode(err)
	var class error
	switch status := httpStatus(err); {
	case code == "NoSuchBucket":
		class = tier.ErrBucket
	case status == http.StatusNotFound:
		class = tier.ErrNotFound
	case status == http.StatusPreconditionFailed || code == "ConditionalRequestConflict":
		class = tier.ErrExists
	case status == http.StatusRequestedRangeNotSatisfiable:
		class = tier.ErrInvalidRange
	}
	if class != nil {
		return fmt.Errorf("tier/s3: %s %s (bucket %s): %w: %w", op, key, s.opts.Bucket, class, err)
	}
	return fmt.Errorf("tier/s3: %s %s (bucket %s): %w", op, key, s.opts.Bucket, err)
}

// bucketErr explains err from HeadBucket.
func (s *Store) bucketErr(err error) error {
	where := fmt.Sprintf("tier/s3: bucket %q at %s (region %s)", s.opts.Bucket, s.endpointName(), s.region)
	var (
		opErr  *net.OpError
		dnsErr *net.DNSError
	)
	switch status := httpStatus(err); {
	case status == http.StatusNotFound:
		return fmt.Errorf("%s: %w: does not exist (HeadBucket 404): %w", where, tier.ErrBucket, tier.ErrNotFound)
	case status == http.StatusForbidden:
		return fmt.Errorf("%s: %w: access denied (HeadBucket 403; check the credentials and the bucket policy): %w", where, tier.ErrBucket, err)
	case status == http.StatusMovedPermanently:
		return fmt.Errorf("%s: %w: the bucket is in another region (HeadBucket 301): %w", where, tier.ErrBucket, err)
	case status != 0:
		return fmt.Errorf("%s: %w: HeadBucket answered %d: %w", where, tier.ErrBucket, status, err)
	case strings.Contains(err.Error(), "get credentials"): // the SDK's auth step; it has no error type
		return fmt.Errorf("%s: %w: no usable AWS credentials (environment, shared files, IMDS): %w", where, tier.ErrBucket, err)
	case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("%s: %w: no answer in time: %w", where, tier.ErrBucket, err)
	case errors.As(err, &dnsErr) || errors.As(err, &opErr):
		return fmt.Errorf("%s: %w: cannot reach the endpoint: %w", where, tier.ErrBucket, err)
	}
	return fmt.Errorf("%s: %w: %w", where, tier.ErrBucket, err)
}

// endpointName returns the endpoint for messages: Options.Endpoint or
// "AWS S3".
func (s *Store) endpointName() string {
	if s.opts.Endpoint != "" {
		return s.opts.Endpoint
	}
	return "AWS S3"
}
