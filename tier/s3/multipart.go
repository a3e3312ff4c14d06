package s3

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/seedqueue/sq/tier"
)

// abortTimeout bounds AbortMultipartUpload after a failed upload; it runs
// even when the caller's context is done, so parts are not left billed.
const abortTimeout = 30 * time.Second

// partBytes returns the part size for an object of size bytes: Options.
// MultipartBytes, or more when that would take more than MaxParts parts.
func (s *Store) partBytes(size int64) int64 {
	part := s.opts.MultipartBytes
	if need := (size + MaxParts - 1) / MaxParts; need > part {
		part = need
	}
	return part
}

// putMultipart uploads size bytes of body under key in parts, one after
// the other, and completes the upload (with If-None-Match: * when
// opts.IfAbsent). On any failure it aborts the upload, so no parts are
// left stored, and returns the first error.
func (s *Store) putMultipart(ctx context.Context, key string, body io.ReaderAt, size int64, meta map[string]string, opts tier.PutOptions) (err error) {
	created, err := s.client.CreateMultipartUpload(ctx, &awss3.CreateMultipartUploadInput{
		Bucket:   aws.String(s.opts.Bucket),
		Key:      aws.String(key),
		Metadata: meta,
	})
	if err != nil {
		return s.mapErr("create multipart upload", key, err)
	}
	uploadID := created.UploadId
	defer func() {
		if err == nil {
			return
		}
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), abortTimeout)
		defer cancel()
		_, aerr := s.client.AbortMultipartUpload(actx, &awss3.AbortMultipartUploadInput{
			Bucket: aws.String(s.opts.Bucket), Key: aws.String(key), UploadId: uploadID,
		})
		if aerr != nil {
			err = fmt.Errorf("%w (and aborting upload %s failed: %v)", err, aws.ToString(uploadID), aerr)
		}
	}()
	part := s.partBytes(size)
	var parts []types.CompletedPart
	for off, num := int64(0), int32(1); off < size; off, num = off+part, num+1 {
		n := min(part, size-off)
		out, err := s.client.UploadPart(ctx, &awss3.UploadPartInput{
			Bucket:        aws.String(s.opts.Bucket),
			Key:           aws.String(key),
			UploadId:      uploadID,
			PartNumber:    aws.Int32(num),
			Body:          io.NewSectionReader(body, off, n),
			ContentLength: aws.Int64(n),
		})
		if err != nil {
			return s.mapErr(fmt.Sprintf("upload part %d (bytes %d-%d) of", num, off, off+n-1), key, err)
		}
		parts = append(parts, types.CompletedPart{ETag: out.ETag, PartNumber: aws.Int32(num)})
	}
	in := &awss3.CompleteMultipartUploadInput{
		Bucket:          aws.String(s.opts.Bucket),
		Key:             aws.String(key),
		UploadId:        uploadID,
		MultipartUpload: &types.CompletedMultipartUpload{Parts: parts},
	}
	if opts.IfAbsent {
		in.IfNoneMatch = aws.String("*")
	}
	if _, err := s.client.CompleteMultipartUpload(ctx, in); err != nil {
		if errorCode(err) == "NoSuchUpload" {
			// A retry after an attempt that completed the upload but
			// whose answer was lost; Put's verification decides.
			return nil
		}
		return s.mapErr("complete multipart upload", key, err)
	}
	return nil
}
