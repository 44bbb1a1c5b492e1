package claimcheck

import (
	"context"
	"encoding/base64"
	"encoding/hex"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/feature/s3/transfermanager"
	tmtypes "github.com/aws/aws-sdk-go-v2/feature/s3/transfermanager/types"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go/middleware"
	"gocloud.dev/blob"
)

// s3MultipartOver is the payload size from which an S3 upload is
// multipart (the transfer manager's default threshold, set explicitly so
// that the single-request path below knows where it applies).
const s3MultipartOver = 16 << 20

// s3Upload is how a Store on S3 uploads: the payload's SHA-256, computed
// once for the reference, is also the upload's checksum and its signature's
// payload hash, so the AWS SDK hashes nothing again.
type s3Upload struct {
	client *s3.Client
	// checksums is false when the client is configured to send checksums
	// only where S3 requires them (RequestChecksumCalculation
	// when_required, for S3-compatible servers that refuse them).
	checksums bool
}

// newS3Upload returns the S3 upload of bucket, or nil when bucket is not
// on S3.
func newS3Upload(bucket *blob.Bucket) *s3Upload {
	var client *s3.Client
	if !bucket.As(&client) {
		return nil
	}
	return &s3Upload{client: client, checksums: client.Options().RequestChecksumCalculation != aws.RequestChecksumCalculationWhenRequired}
}

// beforeWrite sets up the upload of a payload of size bytes with SHA-256
// sum.
//
// A payload under s3MultipartOver goes in one PutObject. It carries sum
// as x-amz-checksum-sha256, which S3 checks and keeps as the object's
// checksum, and as the SigV4 payload hash (x-amz-content-sha256, signed,
// and checked by S3 too): the bytes S3 stores are verified to be the ones
// the reference names, over plain HTTP as over TLS, without the SDK
// hashing them again (it would compute a CRC32 for its default checksum
// and, without TLS, a SHA-256 for the signature). UNSIGNED-PAYLOAD would
// skip the signature's hash too, but without TLS nothing would then
// protect the body, so the hash is kept, and given.
//
// A multipart upload's parts get SHA-256 checksums the SDK computes, one
// pass that also serves as each part's payload hash.
func (u *s3Upload) beforeWrite(size int, sum [32]byte) func(as func(any) bool) error {
	return func(as func(any) bool) error {
		var in *transfermanager.UploadObjectInput
		var tm *transfermanager.Client
		if !as(&in) || !as(&tm) {
			return nil
		}
		in.ContentLength = aws.Int64(int64(size))
		if u.checksums {
			in.ChecksumAlgorithm = tmtypes.ChecksumAlgorithmSha256
		}
		api := transfermanager.S3APIClient(u.client)
		if size < s3MultipartOver {
			if u.checksums {
				in.ChecksumSHA256 = aws.String(base64.StdEncoding.EncodeToString(sum[:]))
			}
			api = presignedPut{S3APIClient: u.client, payloadHash: hex.EncodeToString(sum[:])}
		}
		// gocloud.dev's s3blob hands out its transfer manager for this: its
		// options cannot be changed, so it is replaced by one with the
		// same settings and a client that gives PutObject the hash.
		*tm = *transfermanager.New(api, func(o *transfermanager.Options) {
			o.RequestChecksumCalculation = u.client.Options().RequestChecksumCalculation
			o.MultipartUploadThreshold = s3MultipartOver
		})
		return nil
	}
}

// presignedPut is an S3 client whose PutObject signs the request with
// payloadHash, the hex SHA-256 of its body, rather than hashing the body.
type presignedPut struct {
	transfermanager.S3APIClient
	payloadHash string
}

func (p presignedPut) PutObject(ctx context.Context, in *s3.PutObjectInput, opts ...func(*s3.Options)) (*s3.PutObjectOutput, error) {
	opts = append(opts, func(o *s3.Options) {
		o.APIOptions = append(o.APIOptions, func(stack *middleware.Stack) error {
			return stack.Finalize.Insert(payloadHash(p.payloadHash), (*v4.ComputePayloadSHA256)(nil).ID(), middleware.Before)
		})
	})
	return p.S3APIClient.PutObject(ctx, in, opts...)
}

// payloadHash sets the SigV4 payload hash, which the SDK's
// ComputePayloadSHA256 then takes instead of hashing the body.
type payloadHash string

func (payloadHash) ID() string { return "txoutbox:PayloadHash" }

func (h payloadHash) HandleFinalize(ctx context.Context, in middleware.FinalizeInput, next middleware.FinalizeHandler) (middleware.FinalizeOutput, middleware.Metadata, error) {
	return next.HandleFinalize(v4.SetPayloadHash(ctx, string(h)), in)
}

// s3Read makes a GetObject leave the checking of the body to Fetch: the
// SDK would otherwise hash it again to check the object's stored
// checksum, which Fetch's SHA-256 against the reference covers.
func s3Read(as func(any) bool) error {
	var opts *[]func(*s3.Options)
	if as(&opts) {
		*opts = append(*opts, func(o *s3.Options) {
			o.ResponseChecksumValidation = aws.ResponseChecksumValidationWhenRequired
		})
	}
	return nil
}
