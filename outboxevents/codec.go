package outboxevents

import "encoding/json"

// Codec turns events into message bodies and back. A Registry uses one codec
// for every event type; its content type travels in each message's
// content-type header, so consumers know how to read the body.
type Codec interface {
	// ContentType is the media type of the bodies, e.g. "application/json".
	ContentType() string
	// Marshal encodes an event (a value of a registered type).
	Marshal(event any) ([]byte, error)
	// Unmarshal decodes body into target, a pointer to a registered type.
	Unmarshal(body []byte, target any) error
}

// JSON is the default Codec: encoding/json, content type application/json.
type JSON struct{}

// ContentType returns "application/json".
func (JSON) ContentType() string { return "application/json" }

// Marshal encodes event with encoding/json.
func (JSON) Marshal(event any) ([]byte, error) { return json.Marshal(event) }

// Unmarshal decodes body with encoding/json.
func (JSON) Unmarshal(body []byte, target any) error { return json.Unmarshal(body, target) }
