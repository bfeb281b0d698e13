// Package outboxs3 is an outbox.BlobStore on Amazon S3 or any S3-compatible
// service (MinIO, Ceph, Cloudflare R2...): the place where outbox.ClaimCheck
// puts the payloads too large for a broker, and from which
// outbox.ResolveClaimChecks gets them back for consumers.
//
//	blobs, err := outboxs3.Open(ctx, "orders-claim-checks", outboxs3.Config{})
//	pub, err := outbox.ClaimCheck(snsPublisher, blobs, outbox.ClaimCheckConfig{})
//
// New wraps an S3 client the caller made; Open makes one from the SDK's
// standard chain (AWS_REGION, AWS_ACCESS_KEY_ID, AWS_PROFILE, the instance's
// or task's role), with Config.Endpoint and Config.PathStyle for a service
// other than AWS S3. Neither connects: Check tells at start whether the
// bucket exists and the credentials reach it. The relay needs s3:PutObject;
// consumers need s3:GetObject; DiscardDeadBlobs needs s3:DeleteObject.
//
// # Errors
//
//   - Get of a missing key: an error matching outbox.ErrBlobNotFound,
//     retryable (the consumer's adapter redelivers the message, then parks
//     it after its MaxDeliver);
//   - no connection could be made: outbox.Unavailable (nothing was stored;
//     the relay counts no attempt and pauses until S3 answers);
//   - a blob over MaxBlobSize (5 GiB), EntityTooLarge, KeyTooLongError:
//     outbox.Permanent;
//   - anything else, a missing bucket and refused credentials included:
//     retryable, so that fixing the configuration sends every message.
//
// The SDK retries a request itself (three attempts by default): Put is
// idempotent, a blob being the same bytes under the same key at every
// attempt.
//
// # Retention
//
// Consumers never delete a blob: a message may have several consumers, and
// a broker may deliver it again. Let the bucket expire them with a lifecycle
// rule on the claim check's prefix (outbox.ClaimCheckConfig.Prefix), set
// once, longer than a message may still be delivered (the broker's
// retention, plus the time parked messages may wait for a retry):
//
//	aws s3api put-bucket-lifecycle-configuration --bucket orders-claim-checks \
//	  --lifecycle-configuration '{"Rules":[{"ID":"outbox-claim-check","Status":"Enabled",
//	    "Filter":{"Prefix":"outbox-claim-check/"},"Expiration":{"Days":30}}]}'
//
// A message discarded from the dead letters with outbox.DiscardDeadBlobs
// has its blob deleted at once.
package outboxs3
