package awstest

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
)

// SQSConsumerEndpoint starts an endpoint like SQSConsumerClient's and
// returns its URL, on the loopback interface, for SQS clients in other
// processes (consumer processes a test kills): goaws's queues live in the
// test process, so a process of its own cannot run a goaws of its own, and
// it needs this endpoint's long polls and visibility timeouts. Build the
// client with SQSClientAt. The endpoint closes when the test ends.
func (s *Server) SQSConsumerEndpoint(t testing.TB) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(s.serveConsumer))
	t.Cleanup(srv.Close)
	return srv.URL
}

// SQSClientAt returns an SQS client speaking goaws's query protocol to
// endpoint (a URL from SQSConsumerEndpoint or Server.URL), with the
// credentials and region the emulator takes: what another process builds
// from a URL it was given.
func SQSClientAt(endpoint string) *sqs.Client {
	return sqs.New(sqs.Options{
		BaseEndpoint: aws.String(endpoint),
		Credentials:  credentials.NewStaticCredentialsProvider("test", "test", ""),
		Region:       Region,
	}, SQSProtocol)
}
