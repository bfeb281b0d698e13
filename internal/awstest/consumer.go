package awstest

import (
	"bytes"
	"encoding/xml"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Admiral-Piett/goaws/app"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
)

// SQSConsumerClient returns an SQS client for s, through an endpoint of its
// own that gives goaws what a consumer needs of SQS and goaws v0.4.5 lacks:
//
//   - long polling that does not hold goaws: goaws serves one request at a
//     time (see handler), and its own long poll would hold every other
//     request, deletions included, for the whole wait. ReceiveMessage's
//     WaitTimeSeconds is served here with short receives every 20ms until
//     a message comes, the wait passes or the client gives up;
//   - visibility timeouts that end: goaws makes a received message visible
//     again only in a periodic task the router does not start; each receive
//     here first makes visible again the messages whose timeout passed;
//   - ReceiveMessage's VisibilityTimeout, which goaws ignores (it uses the
//     queue's, 0 unless the queue was made with one: a message received
//     would be visible again at once); without it, the queue's or SQS's
//     default of 30s;
//   - ApproximateReceiveCount, which goaws leaves at 1: it counts the times
//     a message was received before (goaws's Retry, raised at each return
//     to visibility), plus this one;
//   - FIFO group locks that hold: goaws locks one group at a time (a
//     receive of a second group lets the first go); each receive here first
//     locks every group with a message in flight, as SQS does.
//
// Faults set on s (FailRequests, Stall) apply to its requests too.
func (s *Server) SQSConsumerClient(t testing.TB) *sqs.Client {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(s.serveConsumer))
	t.Cleanup(srv.Close)
	return sqs.New(sqs.Options{
		BaseEndpoint: aws.String(srv.URL),
		Credentials:  credentials.NewStaticCredentialsProvider("test", "test", ""),
		Region:       Region,
	}, SQSProtocol)
}

// receiving serializes the consumer clients' receives (see serveConsumer).
var receiving sync.Mutex

func (s *Server) serveConsumer(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(req.Body)
	if err != nil {
		return
	}
	form, _ := url.ParseQuery(string(body))
	if form.Get("Action") != "ReceiveMessage" {
		req.Body = io.NopCloser(bytes.NewReader(body))
		s.serve(w, req)
		return
	}
	wait, _ := strconv.Atoi(form.Get("WaitTimeSeconds"))
	visibility, _ := strconv.Atoi(form.Get("VisibilityTimeout"))
	queue := form.Get("QueueUrl")
	queue = queue[strings.LastIndex(queue, "/")+1:]
	form.Del("WaitTimeSeconds")
	form.Del("VisibilityTimeout")
	deadline := time.Now().Add(time.Duration(wait) * time.Second)
	for {
		// One receive at a time, from settling to hiding: goaws's own
		// visibility timeout of a queue made without one is 0, so between
		// its receive and hide another receive's settling would make the
		// message visible again and hand it out twice.
		receiving.Lock()
		settleVisibility(queue)
		rec := httptest.NewRecorder()
		sub := httptest.NewRequestWithContext(req.Context(), http.MethodPost, req.URL.String(), strings.NewReader(form.Encode()))
		sub.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		s.serve(rec, sub)
		var got struct {
			Handles []string `xml:"ReceiveMessageResult>Message>ReceiptHandle"`
		}
		_ = xml.Unmarshal(rec.Body.Bytes(), &got)
		done := rec.Code != http.StatusOK || len(got.Handles) > 0 || !time.Now().Before(deadline)
		if done {
			hide(queue, got.Handles, time.Duration(visibility)*time.Second)
		}
		receiving.Unlock()
		if done {
			for k, vs := range rec.Header() {
				w.Header()[k] = vs
			}
			w.WriteHeader(rec.Code)
			_, _ = w.Write(rec.Body.Bytes())
			return
		}
		select {
		case <-req.Context().Done():
			return
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// settleVisibility makes visible again the messages of queue whose
// visibility timeout passed, counting it in their Retry (what goaws's
// periodic task does, without its dead-letter move); sets
// NumberOfReceives, which goaws reports plus one as ApproximateReceiveCount,
// to the receives before; and locks each FIFO group that has a message in
// flight.
//
// Only queue's: another test's client may have received a message of its
// own queue with goaws's visibility timeout of 0 and be about to delete it.
func settleVisibility(queue string) {
	goawsMu.Lock()
	defer goawsMu.Unlock()
	app.SyncQueues.Lock()
	defer app.SyncQueues.Unlock()
	now := time.Now()
	if q := app.SyncQueues.Queues[queue]; q != nil {
		locked := map[string]int{}
		for i := range q.Messages {
			m := &q.Messages[i]
			if m.ReceiptHandle != "" && m.VisibilityTimeout.Before(now) {
				m.ReceiptHandle = ""
				m.ReceiptTime = now
				m.Retry++
			}
			m.NumberOfReceives = m.Retry
			if m.ReceiptHandle != "" && q.IsFIFO {
				locked[m.GroupID] = 0
			}
		}
		if q.IsFIFO {
			q.FIFOMessages = locked
		}
	}
}

// hide sets the visibility timeout of the messages of queue just received
// with handles to d from now; without d, to the queue's, or SQS's default of
// 30s when the queue has none (goaws's default is 0: a message received
// would be visible again at once).
func hide(queue string, handles []string, d time.Duration) {
	if len(handles) == 0 {
		return
	}
	goawsMu.Lock()
	defer goawsMu.Unlock()
	app.SyncQueues.Lock()
	defer app.SyncQueues.Unlock()
	want := map[string]bool{}
	for _, h := range handles {
		want[h] = true
	}
	q := app.SyncQueues.Queues[queue]
	if q == nil {
		return
	}
	if d == 0 {
		d = time.Duration(q.TimeoutSecs) * time.Second
	}
	if d == 0 {
		d = 30 * time.Second
	}
	until := time.Now().Add(d)
	for i := range q.Messages {
		if m := &q.Messages[i]; want[m.ReceiptHandle] {
			m.VisibilityTimeout = until
		}
	}
}
