package outboxevents

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/go-outbox/outbox"
)

// The CloudEvents attributes, as binary-mode headers (the ce- prefix of the
// Kafka and HTTP bindings), and the content type header.
const (
	HeaderSpecVersion   = "ce-specversion"
	HeaderType          = "ce-type"
	HeaderID            = "ce-id"
	HeaderSource        = "ce-source"
	HeaderTime          = "ce-time"
	HeaderSchemaVersion = "ce-schemaversion" // an extension attribute: the event type's Version
	HeaderContentType   = "content-type"

	// SpecVersion is the CloudEvents version of the headers.
	SpecVersion = "1.0"
	// SourceDefault is ce-source when Options.Source is empty.
	SourceDefault = "outbox"
)

// Errors of Decode and the Dispatcher, for errors.Is.
var (
	// ErrUnknownType means no registered type (or alias) has the message's
	// event type name.
	ErrUnknownType = errors.New("outboxevents: unknown event type")
	// ErrUndecodable means the body or a header of the message cannot be
	// turned into its registered type.
	ErrUndecodable = errors.New("outboxevents: undecodable event")
	// ErrNewerVersion means the message was written at a schema version
	// above the registered type's: this process is older than the writer,
	// as during a rolling deploy, and an upgraded one can decode it.
	ErrNewerVersion = errors.New("outboxevents: event version newer than registered")
)

// Options configures a Registry. The zero value uses JSON and the source
// "outbox".
type Options struct {
	// Codec encodes and decodes every event body. Default JSON{}.
	Codec Codec
	// Source is the ce-source of the events written, a URI reference that
	// names the producing service, e.g. "/orders-service". Default
	// SourceDefault.
	Source string
}

// Registry maps event types to their names and back. Register every type
// before the registry is used; after that it is safe for concurrent use.
type Registry struct {
	codec  Codec
	source string

	mu     sync.RWMutex
	byName map[string]*eventType // names and aliases
	byType map[reflect.Type]*eventType
}

// eventType is one registered type.
type eventType struct {
	name     string
	typ      reflect.Type
	version  int
	upcasts  map[int]func([]byte) ([]byte, error) // from version k to k+1
	aliases  []string                             // older names (Alias)
	aliasFor string                               // set on alias entries: the current name
}

// NewRegistry returns an empty registry.
func NewRegistry(opts Options) *Registry {
	if opts.Codec == nil {
		opts.Codec = JSON{}
	}
	if opts.Source == "" {
		opts.Source = SourceDefault
	}
	return &Registry{codec: opts.Codec, source: opts.Source, byName: map[string]*eventType{}, byType: map[reflect.Type]*eventType{}}
}

// TypeOption refines a Register call.
type TypeOption func(*eventType) error

// Version sets the type's schema version (default 1), carried in
// ce-schemaversion. Raise it when the shape changes, and give an Upcast from
// each older version still in flight.
func Version(v int) TypeOption {
	return func(t *eventType) error {
		if v < 1 {
			return fmt.Errorf("version %d: use 1 or more", v)
		}
		t.version = v
		return nil
	}
}

// Upcast turns a body written at version from into the shape of version
// from+1. Decode applies the upcasts in turn, from a message's version up to
// the type's Version.
func Upcast(from int, fn func(body []byte) ([]byte, error)) TypeOption {
	return func(t *eventType) error {
		if from < 1 || fn == nil {
			return fmt.Errorf("upcast from version %d: give a version of 1 or more and a function", from)
		}
		if t.upcasts == nil {
			t.upcasts = map[int]func([]byte) ([]byte, error){}
		}
		t.upcasts[from] = fn
		return nil
	}
}

// Alias makes messages written under an older name of the type decode as
// the type, after it was renamed. New messages carry the current name.
func Alias(old string) TypeOption {
	return func(t *eventType) error {
		if old == "" {
			return errors.New("empty alias")
		}
		t.aliases = append(t.aliases, old)
		return nil
	}
}

// Register adds the event type E under name (its Go type name when name is
// empty). E is a type the codec can encode: usually a struct, handled by
// value; or a pointer to a struct, such as a generated protobuf message,
// handled as that pointer (Decode returns a new one). Registering a type or
// a name twice is an error.
func Register[E any](r *Registry, name string, opts ...TypeOption) error {
	typ := reflect.TypeFor[E]()
	if name == "" {
		name = typ.Name()
		if typ.Kind() == reflect.Pointer {
			name = typ.Elem().Name()
		}
	}
	if name == "" {
		return fmt.Errorf("outboxevents: register %v: the type has no name of its own; pass a name", typ)
	}
	if typ.Kind() == reflect.Interface || typ.Kind() == reflect.Pointer && typ.Elem().Kind() == reflect.Pointer {
		return fmt.Errorf("outboxevents: register %v as %q: register a concrete type or a pointer to one, not an interface", typ, name)
	}
	t := &eventType{name: name, typ: typ, version: 1}
	for _, opt := range opts {
		if err := opt(t); err != nil {
			return fmt.Errorf("outboxevents: register %v as %q: %w", typ, name, err)
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	names := append([]string{name}, t.aliases...)
	for _, n := range names {
		if other, ok := r.byName[n]; ok {
			return fmt.Errorf("outboxevents: register %v as %q: the name %q is taken by %v", typ, name, n, other.typ)
		}
	}
	if other, ok := r.byType[typ]; ok {
		return fmt.Errorf("outboxevents: register %v as %q: the type is registered already, as %q", typ, name, other.name)
	}
	r.byType[typ] = t
	r.byName[name] = t
	for _, alias := range t.aliases {
		r.byName[alias] = &eventType{name: name, typ: typ, version: t.version, upcasts: t.upcasts, aliasFor: name}
	}
	return nil
}

// MustRegister is Register that panics on error, for package-level setup.
func MustRegister[E any](r *Registry, name string, opts ...TypeOption) {
	if err := Register[E](r, name, opts...); err != nil {
		panic(err)
	}
}

// Name returns the registered name of event's type.
func (r *Registry) Name(event any) (string, error) {
	t, err := r.typeOf(event)
	if err != nil {
		return "", err
	}
	return t.name, nil
}

func (r *Registry) typeOf(event any) (*eventType, error) {
	typ := reflect.TypeOf(event)
	r.mu.RLock()
	t, ok := r.byType[typ]
	r.mu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("%w: %v is not registered (registered: %s); call outboxevents.Register[%v] first", ErrUnknownType, typ, r.names(), typ)
	}
	return t, nil
}

// names lists the registered names, for error messages.
func (r *Registry) names() string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	var names []string
	for n, t := range r.byName {
		if t.aliasFor == "" {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}

// Message encodes event as an outbox message with a new id: Topic and
// ce-type are its registered name, Key is key, and the CloudEvents headers
// and content type are set.
func (r *Registry) Message(event any, key string) (*outbox.Message, error) {
	t, err := r.typeOf(event)
	if err != nil {
		return nil, err
	}
	body, err := r.codec.Marshal(event)
	if err != nil {
		return nil, fmt.Errorf("outboxevents: encode %s: %w", t.name, err)
	}
	id, err := uuid.NewV7()
	if err != nil {
		return nil, fmt.Errorf("outboxevents: new event id: %w", err)
	}
	return &outbox.Message{
		ID:      id,
		Topic:   t.name,
		Key:     key,
		Payload: body,
		Headers: map[string]string{
			HeaderSpecVersion:   SpecVersion,
			HeaderType:          t.name,
			HeaderID:            id.String(),
			HeaderSource:        r.source,
			HeaderTime:          time.Now().UTC().Format(time.RFC3339Nano),
			HeaderSchemaVersion: strconv.Itoa(t.version),
			HeaderContentType:   r.codec.ContentType(),
		},
	}, nil
}

// Decode returns the event a message carries, as a value of its registered
// type, and the type's current name. The type comes from ce-type (or the
// topic, for messages without it), through aliases; a body written at an
// older version is upcast first. Errors wrap ErrUnknownType,
// ErrUndecodable or ErrNewerVersion and name the type and the registered ones.
func (r *Registry) Decode(m outbox.Message) (event any, name string, err error) {
	typeName := m.Headers[HeaderType]
	if typeName == "" {
		typeName = m.Topic
	}
	r.mu.RLock()
	t, ok := r.byName[typeName]
	r.mu.RUnlock()
	if !ok {
		return nil, "", fmt.Errorf("%w %q in message %s (registered: %s)", ErrUnknownType, typeName, m.ID, r.names())
	}
	body := m.Payload
	version := 1
	if v, ok := m.Headers[HeaderSchemaVersion]; ok {
		if version, err = strconv.Atoi(v); err != nil || version < 1 {
			return nil, "", fmt.Errorf("%w: message %s of type %q has %s %q, not a version number", ErrUndecodable, m.ID, typeName, HeaderSchemaVersion, v)
		}
	}
	if version > t.version {
		return nil, "", fmt.Errorf("%w: message %s of type %q is at version %d, newer than the registered %d; upgrade this consumer", ErrNewerVersion, m.ID, typeName, version, t.version)
	}
	for ; version < t.version; version++ {
		up := t.upcasts[version]
		if up == nil {
			return nil, "", fmt.Errorf("%w: message %s of type %q is at version %d and no upcast goes from it to %d; register one with outboxevents.Upcast(%d, ...)", ErrUndecodable, m.ID, typeName, version, version+1, version)
		}
		if body, err = up(body); err != nil {
			return nil, "", fmt.Errorf("%w: message %s of type %q: upcast from version %d: %w", ErrUndecodable, m.ID, typeName, version, err)
		}
	}
	// A pointer type decodes into a new value it points to.
	target := reflect.New(t.typ)
	if t.typ.Kind() == reflect.Pointer {
		target = reflect.New(t.typ.Elem())
	}
	if err := r.codec.Unmarshal(body, target.Interface()); err != nil {
		return nil, "", fmt.Errorf("%w: message %s of type %q as %v: %w", ErrUndecodable, m.ID, t.name, t.typ, err)
	}
	if t.typ.Kind() == reflect.Pointer {
		return target.Interface(), t.name, nil
	}
	return target.Elem().Interface(), t.name, nil
}
