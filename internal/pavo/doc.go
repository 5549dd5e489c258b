// Package pavo is PCP as a pavo view driver: the ndjson op protocol a pavo
// host (a dashboard) speaks with a driver's serve verb on its standard
// input and output, answered from a running pcpd. `pcpctl serve` is a
// thin command around Serve.
//
// The parts, from the bytes inwards:
//
//   - serve.go reads bounded lines (MaxLine), hands each to Handle and
//     writes exactly one reply line per request line, in order.
//   - wire.go decodes one request line (Decode: one JSON object, bounded
//     nesting, no duplicate keys, typed fields per op) and encodes the
//     reply envelope {"ok":true,"result":…} or {"ok":false,"error":"…"}
//     with the other arm absent. Nothing a host sends can make Handle
//     panic or write anything but one such line.
//   - types.go holds the protocol's types: DriverManifest, ViewSpec,
//     ViewNode, FormField, ViewResult, SubmitResult, RenderModel, JobItem,
//     NotificationItem. SubmitResult, JobItem and NotificationItem keep
//     unknown members in a catch-all (Extra) across a decode and encode.
//   - driver.go is the op table; views.go the views, their bindings and
//     their forms; queries.go the named queries and the read-only daemon
//     methods a query may call; values.go the checks of params and form
//     values against FormFields; render.go the render kinds; submit.go
//     the forms and their submission; feeds.go the jobs and notifications
//     feeds.
//   - daemon.go is the connection to pcpd, behind the Caller interface,
//     and Redial, which dials lazily and again after the daemon went away.
//
// docs/pavo.md describes the driver byte by byte; schema/wire.schema.json
// (JSON Schema 2020-12, also exported as Schema) describes every request,
// reply and type.
package pavo
