// Package largepayloads tests the claim check (package claimcheck) end to
// end: both relay modes against PostgreSQL and a kfake broker, with the
// payloads in a file store or, in s3_test.go, the S3 server .ci/services
// starts. Its tests are its content.
package largepayloads
