package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/sns"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/smithy-go"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/outboxaws"
)

// awsCheckTimeout bounds the start-up check of the queue or topic.
const awsCheckTimeout = 5 * time.Second

// sqsClientOptions are added to the SQS client's options; tests set the
// query protocol, the only one goaws speaks (AWS_ENDPOINT_URL_SQS sets an
// endpoint, never a protocol).
var sqsClientOptions []func(*sqs.Options)

// awsCredentialsHint says where AWS credentials go, for a URL that has some.
const awsCredentialsHint = "credentials do not go in the URL: the SDK's chain finds them (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, AWS_PROFILE and ~/.aws, the instance's or task's role)"

// badCredentialCodes are AWS's answers to credentials no call can use, as
// opposed to a permission one call lacks.
var badCredentialCodes = map[string]bool{
	"InvalidClientTokenId": true, "UnrecognizedClientException": true, "SignatureDoesNotMatch": true,
	"ExpiredToken": true, "ExpiredTokenException": true, "InvalidAccessKeyId": true,
}

// awsTarget is what an sqs: or sns: --publisher URL names.
type awsTarget struct {
	cfg      outboxaws.Config
	dest     string // queue URL or name; topic ARN
	endpoint string
	region   string
}

// parseAWSQuery reads the parameters both schemes share.
func parseAWSQuery(q url.Values, t *awsTarget) error {
	for name, vs := range q {
		v := vs[len(vs)-1]
		switch name {
		case "endpoint":
			e, err := url.Parse(v)
			if err != nil || (e.Scheme != "http" && e.Scheme != "https") || e.Host == "" {
				return fmt.Errorf("endpoint=%q: use the service's URL, such as http://localhost:4566 for LocalStack", v)
			}
			t.endpoint = v
		case "region":
			if v == "" {
				return fmt.Errorf("region is empty: use a region such as eu-west-1")
			}
			t.region = v
		case "timeout":
			d, err := time.ParseDuration(v)
			if err != nil || d <= 0 {
				return fmt.Errorf("timeout=%q: use a positive duration such as 10s", v)
			}
			t.cfg.Timeout = d
		default:
			return fmt.Errorf("unknown parameter %q; use region, endpoint or timeout", name)
		}
	}
	return nil
}

// parseSQSURL reads an sqs:// --publisher URL:
//
//	sqs://sqs.REGION.amazonaws.com/ACCOUNT/NAME[?region=R&endpoint=E&timeout=D]
//	sqs://NAME[?region=R&endpoint=E&timeout=D]
//
// The first names the queue by its URL (https://HOST/ACCOUNT/NAME, or
// http:// when the endpoint is http, as LocalStack's queue URLs are); the
// second, without a path, by its name, looked up in the region. The region
// is region=, else the SDK's (AWS_REGION, the profile), else the host's.
func parseSQSURL(raw string) (awsTarget, error) {
	var t awsTarget
	u, err := url.Parse(raw)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return t, fmt.Errorf("use sqs://sqs.REGION.amazonaws.com/ACCOUNT/NAME or sqs://NAME: %v", err)
	}
	if u.User != nil {
		return t, errors.New(awsCredentialsHint)
	}
	if err := parseAWSQuery(u.Query(), &t); err != nil {
		return t, err
	}
	path := strings.Trim(u.Path, "/")
	switch {
	case u.Host == "":
		return t, fmt.Errorf("no queue: use sqs://sqs.REGION.amazonaws.com/ACCOUNT/NAME or sqs://NAME")
	case path == "":
		t.dest = u.Host
	case strings.Count(path, "/") != 1:
		return t, fmt.Errorf("path /%s: a queue URL's path is /ACCOUNT/NAME", path)
	default:
		scheme := "https"
		if strings.HasPrefix(t.endpoint, "http:") {
			scheme = "http"
		}
		t.dest = scheme + "://" + u.Host + "/" + path
	}
	return t, t.cfg.Validate()
}

// parseSNSURL reads an sns: --publisher URL, the topic's ARN after the
// scheme (ARNs hold colons, which a URL's host cannot):
//
//	sns:arn:aws:sns:REGION:ACCOUNT:NAME[?endpoint=E&timeout=D]
//
// sns://arn:... is read the same. The region is the ARN's: SNS takes a
// topic's publishes in its own region only.
func parseSNSURL(raw string) (awsTarget, error) {
	var t awsTarget
	rest := raw[len("sns:"):]
	rest = strings.TrimPrefix(rest, "//")
	arn, query, _ := strings.Cut(rest, "?")
	if strings.Contains(arn, "@") {
		return t, errors.New(awsCredentialsHint)
	}
	q, err := url.ParseQuery(query)
	if err != nil {
		return t, fmt.Errorf("parameters %q: %v", query, err)
	}
	if err := parseAWSQuery(q, &t); err != nil {
		return t, err
	}
	region, _, _, ok := outboxaws.ParseTopicARN(arn)
	if !ok {
		return t, fmt.Errorf("%q is not a topic's ARN: use sns:arn:aws:sns:REGION:ACCOUNT:NAME (aws sns list-topics shows it)", arn)
	}
	if t.region != "" && t.region != region {
		return t, fmt.Errorf("region=%s, but the topic is in %s: drop region=, the ARN's region is used", t.region, region)
	}
	t.dest, t.region = arn, region
	return t, t.cfg.Validate()
}

// openSQS builds the publisher for an sqs:// --publisher URL.
func openSQS(raw string) (outbox.Publisher, error) {
	t, err := parseSQSURL(raw)
	if err != nil {
		return nil, usagef("--publisher %q: %v", redact(raw), err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), awsCheckTimeout)
	defer cancel()
	if t.region == "" {
		if awsCfg, err := config.LoadDefaultConfig(ctx); err == nil {
			t.region = awsCfg.Region
		}
	}
	if t.region == "" && !strings.Contains(t.dest, ".amazonaws.com/") {
		return nil, usagef("--publisher %q: no region: add ?region=REGION or set AWS_REGION", redact(raw))
	}
	opts := []func(*sqs.Options){func(o *sqs.Options) {
		if t.region != "" {
			o.Region = t.region
		}
		if t.endpoint != "" {
			o.BaseEndpoint = aws.String(t.endpoint)
		}
	}}
	p, err := outboxaws.OpenSQS(ctx, t.dest, t.cfg, append(opts, sqsClientOptions...)...)
	if err != nil {
		return nil, fmt.Errorf("--publisher %q: %v", redact(raw), err)
	}
	if err := startCheck(ctx, p, p.Check, "SQS queue"); err != nil {
		return nil, err
	}
	return p, nil
}

// openSNS builds the publisher for an sns: --publisher URL.
func openSNS(raw string) (outbox.Publisher, error) {
	t, err := parseSNSURL(raw)
	if err != nil {
		return nil, usagef("--publisher %q: %v", redact(raw), err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), awsCheckTimeout)
	defer cancel()
	p, err := outboxaws.OpenSNS(ctx, t.dest, t.cfg, func(o *sns.Options) {
		if t.endpoint != "" {
			o.BaseEndpoint = aws.String(t.endpoint)
		}
	})
	if err != nil {
		return nil, fmt.Errorf("--publisher %q: %v", redact(raw), err)
	}
	if err := startCheck(ctx, p, p.Check, "SNS topic"); err != nil {
		return nil, err
	}
	return p, nil
}

// startCheck runs the publisher's check at start. A missing queue or topic,
// or credentials AWS refuses outright, fail the start (closing p) rather
// than every batch until an operator reads the log; a permission the check
// lacks may not stop publishing, and AWS not answering may pass: both are
// warned about, and the relay starts.
func startCheck(ctx context.Context, p outbox.Publisher, check func(context.Context) error, what string) error {
	err := check(ctx)
	var api smithy.APIError
	switch {
	case err == nil:
		return nil
	case errors.Is(err, outboxaws.ErrNotFound),
		errors.As(err, &api) && badCredentialCodes[api.ErrorCode()]:
		_ = p.Close()
		return fmt.Errorf("--publisher: %v", err)
	case errors.Is(err, outboxaws.ErrAccessDenied):
		slog.Warn("outbox relay: cannot check the "+what+" at start with these credentials; starting anyway", slog.Any("error", err))
	default:
		slog.Warn("outbox relay: the "+what+" could not be checked at start; starting, batches retry until AWS answers", slog.Any("error", err))
	}
	return nil
}
