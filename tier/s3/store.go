package s3

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/config"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/seedqueue/sq/tier"
)

// crcMetaKey is the user-metadata key (x-amz-meta-sq-crc32c) holding an
// object's CRC-32C as 8 lowercase hex digits.
const crcMetaKey = "sq-crc32c"

// Store is a tier.ObjectStore on one S3 bucket, safe for concurrent use.
type Store struct {
	opts   Options
	region string
	client *awss3.Client
}

var _ tier.ObjectStore = (*Store)(nil)

// New returns a Store for o (after o.Defaults and o.Validate). Credentials
// come from the standard AWS chain: the environment (AWS_ACCESS_KEY_ID,
// AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN), the shared config and
// credentials files (AWS_PROFILE), web identity, ECS and EC2 instance
// metadata (IMDS; AWS_EC2_METADATA_DISABLED=true turns it off). New makes
// no request: Check tests the bucket.
//
// Retries are the SDK's standard retryer configured from o (MaxAttempts,
// BaseDelay, MaxBackoff): it retries connection errors, 5xx responses,
// throttling and timeouts with capped, fully jittered exponential backoff,
// rewinding the request body. Its client-side retry quota is turned off
// (ratelimit.None) so a burst of failures never turns into immediate
// "retry quota exceeded" errors; each call gets its MaxAttempts.
func New(ctx context.Context, o Options) (*Store, error) {
	o.Defaults()
	if err := o.Validate(); err != nil {
		return nil, err
	}
	loaders := []func(*config.LoadOptions) error{
		config.WithRetryer(func() aws.Retryer {
			return retry.NewStandard(func(so *retry.StandardOptions) {
				so.MaxAttempts = o.MaxAttempts
				so.BaseDelay = o.BaseDelay
				so.MaxBackoff = o.MaxBackoff
				so.RateLimiter = ratelimit.None
			})
		}),
	}
	if o.Region != "" {
		loaders = append(loaders, config.WithRegion(o.Region))
	}
	cfg, err := config.LoadDefaultConfig(ctx, loaders...)
	if err != nil {
		return nil, fmt.Errorf("tier/s3: loading the AWS configuration: %w", err)
	}
	if cfg.Region == "" {
		if o.Endpoint == "" {
			return nil, errors.New("tier/s3: no region: set the S3 region or AWS_REGION")
		}
		cfg.Region = DefaultRegion
	}
	client := awss3.NewFromConfig(cfg, func(so *awss3.Options) {
		if o.Endpoint != "" {
			so.BaseEndpoint = aws.String(o.Endpoint)
			so.UsePathStyle = true
			so.RequestChecksumCalculation = aws.RequestChecksumCalculationWhenRequired
			so.ResponseChecksumValidation = aws.ResponseChecksumValidationWhenRequired
		}
	})
	return &Store{opts: o, region: cfg.Region, client: client}, nil
}

// Put uploads body (see tier.ObjectStore.Put): the CRC-32C of its size
// bytes is computed first and sent as the object's metadata
// (x-amz-meta-sq-crc32c). An object of at most Options.MultipartBytes goes
// in one PutObject, a larger one by multipart upload (CreateMultipartUpload,
// UploadPart, CompleteMultipartUpload; AbortMultipartUpload on failure).
// Then the object is verified as Options.Verify says; a mismatch returns
// an error wrapping tier.ErrCorrupt and leaves the object in place (a
// retried Put replaces it).
func (s *Store) Put(ctx context.Context, key string, body io.ReaderAt, size int64, opts tier.PutOptions) (tier.ObjectInfo, error) {
	if size < 0 {
		return tier.ObjectInfo{}, fmt.Errorf("tier/s3: put %s: negative size %d", key, size)
	}
	crc, err := tier.ChecksumReaderAt(body, size)
	if err != nil {
		return tier.ObjectInfo{}, fmt.Errorf("tier/s3: put %s: reading the body: %w", key, err)
	}
	meta := map[string]string{crcMetaKey: fmt.Sprintf("%08x", crc)}
	if size > s.opts.MultipartBytes {
		err = s.putMultipart(ctx, key, body, size, meta, opts)
	} else {
		in := &awss3.PutObjectInput{
			Bucket:        aws.String(s.opts.Bucket),
			Key:           aws.String(key),
			Body:          io.NewSectionReader(body, 0, size),
			ContentLength: aws.Int64(size),
			Metadata:      meta,
		}
		if opts.IfAbsent {
			in.IfNoneMatch = aws.String("*")
		}
		_, err = s.client.PutObject(ctx, in)
		err = s.mapErr("put", key, err)
	}
	if err != nil {
		return tier.ObjectInfo{}, err
	}
	return s.verify(ctx, key, size, crc)
}

// verify checks the object just put under key against size and crc.
func (s *Store) verify(ctx context.Context, key string, size int64, crc uint32) (tier.ObjectInfo, error) {
	info, err := s.Head(ctx, key)
	if err != nil {
		return tier.ObjectInfo{}, fmt.Errorf("tier/s3: put %s: verifying: %w", key, err)
	}
	if info.Size != size || !info.HasCRC32C || info.CRC32C != crc {
		return tier.ObjectInfo{}, fmt.Errorf("tier/s3: put %s: %w: stored %d bytes with CRC-32C %08x (recorded: %v), sent %d bytes with %08x",
			key, tier.ErrCorrupt, info.Size, info.CRC32C, info.HasCRC32C, size, crc)
	}
	if s.opts.Verify == VerifyReadBack {
		if err := tier.Verify(ctx, s, key, size, crc); err != nil {
			return tier.ObjectInfo{}, fmt.Errorf("tier/s3: put %s: read back: %w", key, err)
		}
	}
	return info, nil
}

// Get returns the range's bytes (see tier.ObjectStore.Get) from GetObject
// with an HTTP Range header (RFC 9110 §14.1.2): "bytes=off-off+n-1", or
// "bytes=off-" when n < 0; none for the whole object. A response whose
// Content-Range does not start at off (a server ignoring the range) is
// refused rather than read at the wrong place.
func (s *Store) Get(ctx context.Context, key string, off, n int64) (io.ReadCloser, error) {
	if off < 0 {
		return nil, fmt.Errorf("tier/s3: get %s: %w: offset %d", key, tier.ErrInvalidRange, off)
	}
	if n == 0 {
		info, err := s.Head(ctx, key)
		if err == nil && off > 0 && off >= info.Size {
			err = fmt.Errorf("tier/s3: get %s: %w: offset %d of %d bytes", key, tier.ErrInvalidRange, off, info.Size)
		}
		if err != nil {
			return nil, err
		}
		return io.NopCloser(bytes.NewReader(nil)), nil
	}
	in := &awss3.GetObjectInput{Bucket: aws.String(s.opts.Bucket), Key: aws.String(key)}
	ranged := off > 0 || n > 0
	if ranged {
		r := "bytes=" + strconv.FormatInt(off, 10) + "-"
		if n > 0 {
			r += strconv.FormatInt(off+n-1, 10)
		}
		in.Range = aws.String(r)
	}
	out, err := s.client.GetObject(ctx, in)
	if err != nil {
		if off == 0 && errors.Is(s.mapErr("get", key, err), tier.ErrInvalidRange) {
			return io.NopCloser(bytes.NewReader(nil)), nil // S3 answers 416 to any range of an empty object
		}
		return nil, s.mapErr("get", key, err)
	}
	if !ranged {
		return out.Body, nil
	}
	start, ok := contentRangeStart(aws.ToString(out.ContentRange))
	switch {
	case ok && start == off:
	case !ok && off == 0: // the whole object came back; take the start
		return struct {
			io.Reader
			io.Closer
		}{io.LimitReader(out.Body, n), out.Body}, nil
	default:
		out.Body.Close()
		return nil, fmt.Errorf("tier/s3: get %s: asked for bytes from %d, the answer's Content-Range is %q", key, off, aws.ToString(out.ContentRange))
	}
	return out.Body, nil
}

// contentRangeStart returns the first position of a Content-Range header
// value "bytes first-last/complete".
func contentRangeStart(v string) (int64, bool) {
	rest, ok := strings.CutPrefix(v, "bytes ")
	if !ok {
		return 0, false
	}
	first, _, ok := strings.Cut(rest, "-")
	if !ok {
		return 0, false
	}
	p, err := strconv.ParseInt(first, 10, 64)
	return p, err == nil
}

// Head returns the object's size, time and, from its metadata, CRC-32C
// (HeadObject).
func (s *Store) Head(ctx context.Context, key string) (tier.ObjectInfo, error) {
	out, err := s.client.HeadObject(ctx, &awss3.HeadObjectInput{Bucket: aws.String(s.opts.Bucket), Key: aws.String(key)})
	if err != nil {
		return tier.ObjectInfo{}, s.mapErr("head", key, err)
	}
	info := tier.ObjectInfo{Key: key, Size: aws.ToInt64(out.ContentLength), LastModified: aws.ToTime(out.LastModified)}
	for k, v := range out.Metadata {
		if strings.EqualFold(k, crcMetaKey) {
			if c, err := strconv.ParseUint(v, 16, 32); err == nil && len(v) == 8 {
				info.CRC32C, info.HasCRC32C = uint32(c), true
			}
		}
	}
	return info, nil
}

// List returns the objects under prefix (ListObjectsV2, every page).
func (s *Store) List(ctx context.Context, prefix string) ([]tier.ObjectInfo, error) {
	var out []tier.ObjectInfo
	pages := awss3.NewListObjectsV2Paginator(s.client, &awss3.ListObjectsV2Input{Bucket: aws.String(s.opts.Bucket), Prefix: aws.String(prefix)})
	for pages.HasMorePages() {
		page, err := pages.NextPage(ctx)
		if err != nil {
			return nil, s.mapErr("list", prefix, err)
		}
		for _, o := range page.Contents {
			out = append(out, tier.ObjectInfo{Key: aws.ToString(o.Key), Size: aws.ToInt64(o.Size), LastModified: aws.ToTime(o.LastModified)})
		}
	}
	slices.SortFunc(out, func(a, b tier.ObjectInfo) int { return strings.Compare(a.Key, b.Key) })
	return out, nil
}

// Delete removes the object (DeleteObject); a missing one is not an error.
func (s *Store) Delete(ctx context.Context, key string) error {
	_, err := s.client.DeleteObject(ctx, &awss3.DeleteObjectInput{Bucket: aws.String(s.opts.Bucket), Key: aws.String(key)})
	if err = s.mapErr("delete", key, err); errors.Is(err, tier.ErrNotFound) {
		return nil
	}
	return err
}

// Check tests the bucket with HeadBucket. Errors wrap tier.ErrBucket and
// name the bucket, the endpoint and region, and the cause: the bucket does
// not exist (also tier.ErrNotFound), access is denied (credentials or
// bucket policy), the bucket is in another region, no credentials were
// found, or the endpoint cannot be reached.
func (s *Store) Check(ctx context.Context) error {
	_, err := s.client.HeadBucket(ctx, &awss3.HeadBucketInput{Bucket: aws.String(s.opts.Bucket)})
	if err == nil {
		return nil
	}
	return s.bucketErr(err)
}

// Bucket returns the store's bucket name.
func (s *Store) Bucket() string { return s.opts.Bucket }

// Region returns the region the client signs for.
func (s *Store) Region() string { return s.region }
