package outboxaws

import (
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// A message as large as a queue takes is parked with its parking attributes
// cut to fit, or without them: the park queue would refuse it larger, and
// it would then come back and fail to park forever.
func TestParkingAttributesFitAMessageAsLargeAsAQueueTakes(t *testing.T) {
	attrs := map[string]types.MessageAttributeValue{
		AttrID: {DataType: aws.String("String"), StringValue: aws.String("01a21f62-399d-7ed3-a633-8bfc2a11e800")},
	}
	size := func(body int, attrs map[string]types.MessageAttributeValue) int {
		n := body
		for k, v := range attrs {
			n += len(k) + len(aws.ToString(v.DataType)) + len(aws.ToString(v.StringValue))
		}
		return n
	}
	why := strings.Repeat("a long reason ", 400)
	for _, body := range []int{10, MaxMessageSizeDefault - 2000, MaxMessageSizeDefault - 100, MaxMessageSizeDefault - 60} {
		out := parkAttributes(body, attrs, map[string]string{AttrParkedReason: why, AttrParkedBy: "billing", AttrParkedFrom: "orders/1"})
		if n := size(body, out); n > MaxMessageSizeDefault {
			t.Errorf("body of %d bytes: parked at %d bytes with its attributes; want at most %d", body, n, MaxMessageSizeDefault)
		}
		if body == 10 && len(out) != 4 {
			t.Errorf("a small message parked with %d attributes; want its own and the 3 parking ones", len(out))
		}
	}
}
