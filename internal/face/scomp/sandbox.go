package scomp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"modernc.org/quickjs"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/internal/core"
	"github.com/pcp-dev/pcp/internal/jsonrpc"
)

// evalErrorCode is scomp's code of a failed eval (spec 004), whatever
// the kind; it is the protocol's, not a code of PCP's catalogue.
const evalErrorCode = -32000

// Kinds of a failed eval.
const (
	KindEval    = "EvalError"
	KindTimeout = "TimeoutError"
	KindMemory  = "MemoryError"
	KindBinding = "BindingError"
)

// evalError is the data of a failed eval: its kind, the JavaScript
// stack, and for a BindingError the PCP error the call failed with.
type evalError struct {
	Kind    string    `json:"kind"`
	Stack   string    `json:"stack"`
	PCP     *pcpError `json:"error,omitempty"`
	Message string    `json:"-"`
}

func (e *evalError) Error() string { return e.Message }

// maxStackLines bounds the stack an eval error carries.
const maxStackLines = 16

// shortStack keeps the first maxStackLines frames of stack.
func shortStack(stack string) string {
	lines := strings.SplitAfter(stack, "\n")
	if len(lines) <= maxStackLines+1 {
		return stack
	}
	return strings.Join(lines[:maxStackLines], "") + fmt.Sprintf("    ... %d more frames\n", len(lines)-1-maxStackLines)
}

// pcpError is a PCP error as a binding call rejects with it.
type pcpError struct {
	Code    int             `json:"code"`
	Name    string          `json:"name"`
	Message string          `json:"message"`
	Data    json.RawMessage `json:"data,omitempty"`
}

// sandbox is a session's JavaScript: one QuickJS VM whose global object
// holds the standard library and the session's server bindings, and no
// other host object (no std or os module, no timers, no console). Only
// the connection's goroutine uses it.
type sandbox struct {
	c    *conn
	byID map[string]serverBinding
	list []serverBinding
	// clients are the names of the client's bindings.
	clients []string
	vm      *quickjs.VM

	// Of the eval running: its context and clock, and how its promise
	// settled.
	ctx         context.Context
	sctx        context.Context // ctx with the session, for core calls
	clock       *evalClock
	memoryLimit int
	// crefs are the client's function references the sandbox holds
	// (released by the code, or all when the VM is replaced).
	crefs map[string]bool
	// evCursor is the sequence after which nextEvent looks.
	evCursor int64
	running  bool
	settled  bool
	ok       bool
	outcome  string
}

func newSandbox(c *conn, bindings []serverBinding, clients []string) (*sandbox, error) {
	b := &sandbox{c: c, byID: map[string]serverBinding{}, list: bindings, clients: clients, crefs: map[string]bool{}}
	for _, sb := range bindings {
		b.byID[sb.capID] = sb
	}
	if err := b.reset(); err != nil {
		return nil, err
	}
	return b, nil
}

// prelude installs the bindings and the eval driver, then removes the
// two host functions from the global object: only its closures keep
// them. A binding is an async function of one argument (the
// parameters, {} when absent) that resolves to the capability's result
// or rejects with an Error named BindingError whose pcp property is the
// PCP error.
//
// A client binding is an async function of one argument (undefined is
// null) that resolves to the client's answer to an invoke, or rejects
// with a BindingError as a server binding does.
const prelude = `globalThis.__scomp_install = function (bindingsJSON, clientsJSON) {
  "use strict";
  delete globalThis.__scomp_install;
  const [call, settle, invoke, invokeRef, cref, crelease] = [globalThis.__scomp_call, globalThis.__scomp_settle,
    globalThis.__scomp_invoke, globalThis.__scomp_invoke_ref, globalThis.__scomp_cref, globalThis.__scomp_crelease];
  const bindings = JSON.parse(bindingsJSON), clients = JSON.parse(clientsJSON);
  for (const h of ["call", "settle", "invoke", "invoke_ref", "cref", "crelease"]) delete globalThis["__scomp_" + h];
  const fail = (r) => {
    const e = new Error(r.error.message);
    e.name = "BindingError";
    e.pcp = r.error;
    throw e;
  };
  const refs = new Map();
  let nextRef = 0;
  const toRef = (k, v) => {
    if (typeof v !== "function") return v;
    if (refs.size >= MAXREFS) throw new RangeError("too many function references (MAXREFS): the client must release_ref some");
    const id = "f" + (++nextRef);
    refs.set(id, v);
    return {"$fn": id};
  };
  const isRef = (v) => {
    if (v === null || typeof v !== "object" || Array.isArray(v)) return false;
    const keys = Object.keys(v);
    return keys.length === 1 && keys[0] === "$fn" && typeof v.$fn === "string";
  };
  const revive = (k, v) => isRef(v) ? clientFn(v.$fn) : v;
  const clientFn = (id) => {
    if (!cref(id)) throw new RangeError("too many function references from the client (MAXREFS): release() some");
    const f = function (input) {
      let r;
      try {
        r = JSON.parse(invokeRef(id, JSON.stringify(input === undefined ? null : input, toRef) ?? "null"), revive);
      } catch (e) { return Promise.reject(e); }
      if (r.error) {
        const e = new Error(r.error.message);
        e.name = "BindingError";
        e.pcp = r.error;
        return Promise.reject(e);
      }
      return Promise.resolve(r.result);
    };
    Object.defineProperty(f, "release", {value: function () { crelease(id); }});
    return f;
  };
  for (const name of clients) {
    const f = {[name]: async function (input) {
      const r = JSON.parse(invoke(name, JSON.stringify(input === undefined ? null : input, toRef) ?? "null"), revive);
      if (r.error) fail(r);
      return r.result;
    }}[name];
    Object.defineProperty(globalThis, name, {value: f, enumerable: true});
  }
  for (const [name, id] of bindings) {
    const f = {[name]: function (params) {
      const s = call(id, JSON.stringify(params === undefined ? {} : params) ?? "{}");
      if (s.charCodeAt(0) === 33) {
        const pe = JSON.parse(s.slice(1));
        const e = new Error(pe.message);
        e.name = "BindingError";
        e.pcp = pe;
        return Promise.reject(e);
      }
      return Promise.resolve(JSON.parse(s));
    }}[name];
    Object.defineProperty(globalThis, name, {value: f, enumerable: true});
  }
  const describe = (e) => {
    if (e instanceof Error) {
      return {name: String(e.name), message: String(e.message), stack: String(e.stack ?? ""), pcp: e.pcp};
    }
    return {name: "Error", message: "thrown value: " + String(e), stack: ""};
  };
  Object.defineProperty(globalThis, "__scomp_release", {value: function (id) { refs.delete(id); }});
  Object.defineProperty(globalThis, "__scomp_ref", {value: function (id, input) {
    const f = refs.get(id);
    if (f === undefined) return false;
    let p;
    try { p = Promise.resolve(f(JSON.parse(input, revive))); } catch (e) { p = Promise.reject(e); }
    p.then((v) => {
      let s;
      try { s = JSON.stringify(v === undefined ? null : v, toRef) ?? "null"; } catch (e) { settle(false, JSON.stringify(describe(e))); return; }
      settle(true, s);
    }, (e) => settle(false, JSON.stringify(describe(e))));
    return true;
  }});
  Object.defineProperty(globalThis, "__scomp_run", {value: function (p) {
    p.then((r) => {
      let v = (r !== null && typeof r === "object" && "value" in r) ? r.value : r;
      let s;
      try { s = JSON.stringify(v === undefined ? null : v) ?? "null"; } catch (e) { settle(false, JSON.stringify(describe(e))); return; }
      settle(true, s);
    }, (e) => settle(false, JSON.stringify(describe(e))));
  }});
};`

// preludeCode is the prelude compiled once (a VM of its own compiles it;
// QuickJS bytecode serves any VM of the same engine), and the error
// compiling it, which would be the face's bug.
var preludeCode = sync.OnceValues(func() ([]byte, error) {
	vm, err := quickjs.NewVM()
	if err != nil {
		return nil, err
	}
	defer vm.Close()
	return vm.Compile(strings.ReplaceAll(prelude, "MAXREFS", strconv.Itoa(MaxRefs)), quickjs.EvalGlobal)
})

// reset makes a new VM: at the handshake, and after an eval that ran out
// of time or memory (its jobs and heap are not to be trusted to the next
// eval).
func (b *sandbox) reset() error {
	if b.vm != nil {
		b.vm.Close()
		b.vm = nil
	}
	b.releaseClientRefs()
	vm, err := quickjs.NewVM()
	if err != nil {
		return api.Errorf(api.CodeInternalError, nil, "cannot start the JavaScript engine: %v", err)
	}
	for _, h := range []struct {
		name string
		f    any
	}{{"__scomp_call", b.call}, {"__scomp_settle", b.settle}, {"__scomp_invoke", b.invoke},
		{"__scomp_invoke_ref", b.invokeRef}, {"__scomp_cref", b.cref}, {"__scomp_crelease", b.crelease}} {
		if err := vm.RegisterFunc(h.name, h.f, false); err != nil {
			vm.Close()
			return api.Errorf(api.CodeInternalError, nil, "cannot start the JavaScript engine: %v", err)
		}
	}
	pairs := [][2]string{}
	for _, sb := range b.list {
		key := sb.capID
		if key == "" {
			key = sb.Name // a builtin
		}
		pairs = append(pairs, [2]string{sb.Name, key})
	}
	raw, _ := json.Marshal(pairs)
	clients, _ := json.Marshal(append([]string{}, b.clients...))
	code, err := preludeCode()
	if err == nil {
		_, err = vm.EvalBytecode(code)
	}
	if err == nil {
		_, err = vm.Call("__scomp_install", string(raw), string(clients))
	}
	if err != nil {
		vm.Close()
		return api.Errorf(api.CodeInternalError, nil, "cannot install the bindings: %v", err)
	}
	// The limit is set once the bindings are in, so that it bounds the
	// evals' own memory.
	vm.SetMemoryLimit(uintptr(b.c.limits().MemoryLimit))
	b.vm = vm
	return nil
}

func (b *sandbox) close() {
	if b.vm != nil {
		b.vm.Close()
		b.vm = nil
	}
}

func (b *sandbox) settle(ok bool, s string) {
	if b.settled {
		return
	}
	b.settled, b.ok, b.outcome = true, ok, s
}

// call is a binding call: a real invocation, with the session's
// identity, of capability id, or a call of one of the face's own
// bindings (builtins.go). Its answer is the result's JSON, or "!" and
// the PCP error's {code, name, message, data}. A capability at trust level
// confirm waits for the user's decision (Options.ConfirmWait at most),
// the eval's clock paused meanwhile, then runs or fails with
// CONFIRMATION_DENIED or CONFIRMATION_EXPIRED (CONFIRMATION_REQUIRED,
// still pending, when the wait ran out).
func (b *sandbox) call(id, params string) string {
	if fn, ok := builtins[id]; ok {
		res, err := b.callBuiltin(id, fn, json.RawMessage(params))
		if err != nil {
			return "!" + b.errorAnswer(id, err)
		}
		return serverResult(res, b.attachmentLimit())
	}
	sb, ok := b.byID[id]
	if !ok {
		return "!" + pcpErrorJSON(api.Errorf(api.CodeCapabilityNotFound, map[string]any{"capability_id": id}, "no binding for %s", id))
	}
	res, err := b.c.s.b.InvokeAwaitingDecision(b.sctx, &api.InvokeCapabilityParams{CapabilityID: id, AppID: sb.appID,
		Source: api.SourceSystemIntelligence, Params: json.RawMessage(params)}, b.c.s.confirmWait(), b.pauseClock)
	b.clock.resume()
	if err != nil {
		return "!" + b.errorAnswer(id, err)
	}
	return serverResult(res, b.attachmentLimit())
}

// pauseClock stops the eval's clock while the user decides.
func (b *sandbox) pauseClock(*api.Error) { b.clock.pause() }

// errorAnswer is the answer of a binding call that failed with err.
func (b *sandbox) errorAnswer(id string, err error) string {
	var pe *api.Error
	if !errors.As(err, &pe) {
		if b.ctx.Err() != nil {
			pe = api.Errorf(api.CodeExecutionTimeout, map[string]any{"binding": id}, "the eval's time ran out during the call")
		} else {
			pe = api.Errorf(api.CodeInternalError, nil, "%v", err)
		}
	}
	return pcpErrorJSON(pe)
}

// serverResult is a server binding call's answer of res to the
// prelude. A capability result's attachments are in its attachments
// member, their bytes in base64 within limit (evalAttachments).
func serverResult(res any, limit int64) string {
	// The capability's result, the common case, is written as is: its
	// data is JSON already.
	if r, ok := res.(*api.CapabilityResult); ok && r != nil && api.ValidStatus(r.Status) && (len(r.Data) == 0 || json.Valid(r.Data)) {
		var atts []byte
		if len(r.Attachments) > 0 {
			var err error
			if atts, err = evalAttachments(r.Attachments, limit); err != nil {
				return "!" + pcpErrorJSON(api.AsError(err))
			}
		}
		var b strings.Builder
		b.Grow(len(r.Data) + len(atts) + 40)
		b.WriteString(`{"status":"`)
		b.WriteString(r.Status)
		b.WriteByte('"')
		if len(r.Data) > 0 {
			b.WriteString(`,"data":`)
			b.Write(r.Data)
		}
		if len(atts) > 0 {
			b.WriteString(`,"attachments":`)
			b.Write(atts)
		}
		b.WriteByte('}')
		return b.String()
	}
	out, err := jsonrpc.Marshal(res)
	if err != nil {
		return "!" + pcpErrorJSON(api.Errorf(api.CodeInternalError, nil, "%v", err))
	}
	return string(out)
}

// errorJSON is a failed client binding call's answer to the prelude:
// {"error": PCP error}.
func errorJSON(pe *api.Error) string {
	return `{"error":` + pcpErrorJSON(pe) + `}`
}

// pcpErrorJSON is pe as a binding call rejects with it.
func pcpErrorJSON(pe *api.Error) string {
	var data json.RawMessage
	if pe.Data != nil {
		data, _ = jsonrpc.Marshal(pe.Data)
	}
	msg := pe.Message
	if msg == "" {
		info, _ := pe.Code.Info()
		msg = info.Message
	}
	out, _ := jsonrpc.Marshal(pcpError{Code: int(pe.Code), Name: pe.Code.Name(), Message: msg, Data: data})
	return string(out)
}

// invoke is a client binding call: a reverse invoke (reverse.go). Its
// answer is JSON as call's.
func (b *sandbox) invoke(name, input string) string {
	res, pe := b.c.invokeClient(b.ctx, name, input)
	if pe != nil {
		return errorJSON(pe)
	}
	out, _ := jsonrpc.Marshal(map[string]any{"result": res})
	return string(out)
}

// invokeRef is a call of one of the client's function references: a
// reverse invoke. Its answer is JSON as invoke's.
func (b *sandbox) invokeRef(ref, input string) string {
	res, pe := b.c.invokeClientRef(b.ctx, ref, input)
	if pe != nil {
		return errorJSON(pe)
	}
	out, _ := jsonrpc.Marshal(map[string]any{"result": res})
	return string(out)
}

// cref records that a value from the client handed the sandbox its
// function reference ref; false when the sandbox holds MaxRefs of them.
func (b *sandbox) cref(ref string) bool {
	if !b.crefs[ref] && len(b.crefs) >= MaxRefs {
		return false
	}
	b.crefs[ref] = true
	return true
}

// crelease is the code releasing the client's function reference ref:
// the client is told with release_ref.
func (b *sandbox) crelease(ref string) {
	if !b.crefs[ref] {
		return
	}
	delete(b.crefs, ref)
	b.c.sendRelease(ref)
}

// releaseClientRefs releases every client function reference the
// sandbox holds: its VM is going.
func (b *sandbox) releaseClientRefs() {
	for _, ref := range slices.Sorted(maps.Keys(b.crefs)) {
		delete(b.crefs, ref)
		b.c.sendRelease(ref)
	}
}

// eval runs code as an async global script (top-level await allowed):
// its completion value, JSON-encoded, is the result. The time limit ends
// the eval by interrupting the VM; a VM that ran out of time or memory
// is replaced, the session goes on.
func (b *sandbox) eval(ctx context.Context, code string) (json.RawMessage, error) {
	b.evCursor = b.c.s.b.EventSequence()
	return b.drive(ctx, func() error { return b.run(code) })
}

// callRef calls the function reference id with input (JSON text) and
// awaits it. Called while an eval waits for the client (nested), it runs
// on the same VM within the eval's time, the eval's state set aside;
// otherwise it is driven as an eval is.
func (b *sandbox) callRef(ctx context.Context, id, input string) (json.RawMessage, error) {
	if !b.running {
		return b.drive(ctx, func() error { return b.runRef(id, input) })
	}
	settled, ok, outcome := b.settled, b.ok, b.outcome
	defer func() { b.settled, b.ok, b.outcome = settled, ok, outcome }()
	b.settled, b.ok, b.outcome = false, false, ""
	if err := b.runRef(id, input); err != nil {
		var pe *api.Error
		if errors.As(err, &pe) {
			return nil, pe
		}
		var qe *quickjs.Error
		if errors.As(err, &qe) {
			return nil, &evalError{Kind: KindEval, Stack: shortStack(qe.Stack), Message: qe.Name + ": " + qe.Message}
		}
		return nil, &evalError{Kind: KindEval, Message: err.Error()}
	}
	return b.outcomeOf()
}

// runRef starts the call of function reference id and drives it until
// it settles.
func (b *sandbox) runRef(id, input string) error {
	v, err := b.vm.Call("__scomp_ref", id, input)
	if err != nil {
		return err
	}
	if found, _ := v.(bool); !found {
		return api.Errorf(api.CodeInvalidParams, map[string]any{"param": "ref", "ref": id},
			"no function reference %q: released, or never handed out on this session", id)
	}
	return b.pump()
}

// drive runs start (an eval, or an idle call of a function reference)
// within the eval limits: the time limit interrupts the VM; a VM that
// ran out of time or memory is replaced, the session goes on.
func (b *sandbox) drive(ctx context.Context, start func() error) (json.RawMessage, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	lim := b.c.limits()
	limit := lim.EvalTimeout
	b.memoryLimit = lim.MemoryLimit
	b.vm.SetMemoryLimit(uintptr(lim.MemoryLimit))
	clock := startClock(limit, cancel)
	defer clock.stop()
	b.ctx, b.clock, b.settled, b.ok, b.outcome = ctx, clock, false, false, ""
	b.sctx = core.WithSession(ctx, b.c.sess)
	b.running = true
	defer func() { b.running = false }()
	// The engine clears a pending interrupt at each call from Go into
	// JavaScript (and an eval is several: the script, then its jobs), so
	// one Interrupt may land between two calls and be lost. Once the
	// time is up the interrupt is repeated until start returns.
	finished := make(chan struct{})
	interrupted := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		defer close(interrupted)
		t := time.NewTicker(interruptRepeat)
		defer t.Stop()
		for {
			b.vm.Interrupt()
			select {
			case <-finished:
				return
			case <-t.C:
			}
		}
	})
	err := start()
	close(finished)
	timedOut := false
	if !stop() {
		<-interrupted
		timedOut = true
	}
	if timedOut {
		if rerr := b.reset(); rerr != nil {
			return nil, rerr
		}
		return nil, &evalError{Kind: KindTimeout, Message: fmt.Sprintf("TimeoutError: the eval ran longer than %v", limit)}
	}
	if err != nil {
		var pe *api.Error
		if errors.As(err, &pe) {
			return nil, pe
		}
		var qe *quickjs.Error
		if errors.As(err, &qe) {
			qe.Stack = shortStack(qe.Stack)
			if strings.Contains(qe.Message, "out of memory") {
				if rerr := b.reset(); rerr != nil {
					return nil, rerr
				}
				return nil, &evalError{Kind: KindMemory, Stack: qe.Stack, Message: fmt.Sprintf("MemoryError: the eval used more than %d bytes", b.memoryLimit)}
			}
			return nil, &evalError{Kind: KindEval, Stack: qe.Stack, Message: qe.Name + ": " + qe.Message}
		}
		return nil, &evalError{Kind: KindEval, Message: err.Error()}
	}
	return b.outcomeOf()
}

// outcomeOf is the result or error of the promise that settled.
func (b *sandbox) outcomeOf() (json.RawMessage, error) {
	if b.ok {
		return json.RawMessage(b.outcome), nil
	}
	var d struct {
		Name    string    `json:"name"`
		Message string    `json:"message"`
		Stack   string    `json:"stack"`
		PCP     *pcpError `json:"pcp"`
	}
	json.Unmarshal([]byte(b.outcome), &d)
	d.Stack = shortStack(d.Stack)
	if d.Name == KindBinding && d.PCP != nil {
		return nil, &evalError{Kind: KindBinding, Stack: d.Stack, PCP: d.PCP, Message: d.PCP.Name + ": " + d.PCP.Message}
	}
	if strings.Contains(d.Message, "out of memory") {
		if rerr := b.reset(); rerr != nil {
			return nil, rerr
		}
		return nil, &evalError{Kind: KindMemory, Stack: d.Stack, Message: fmt.Sprintf("MemoryError: the eval used more than %d bytes", b.memoryLimit)}
	}
	return nil, &evalError{Kind: KindEval, Stack: d.Stack, Message: d.Name + ": " + d.Message}
}

// run evaluates code and drives its promise until it settles.
func (b *sandbox) run(code string) error {
	p, err := b.vm.EvalValue(code, quickjs.EvalGlobal|asyncFlag)
	if err != nil {
		return err
	}
	_, err = b.vm.Call("__scomp_run", p)
	p.Free()
	if err != nil {
		return err
	}
	return b.pump()
}

// pump runs the VM's jobs until the promise driven settles.
func (b *sandbox) pump() error {
	for !b.settled {
		n, err := b.vm.ExecutePendingJobs()
		if err != nil {
			return err
		}
		if n == 0 && !b.settled {
			return errors.New("EvalError: the eval awaits a promise that nothing can settle")
		}
	}
	return nil
}

// interruptRepeat is how often an eval whose time is up is told again to
// stop.
const interruptRepeat = 5 * time.Millisecond

// asyncFlag is QuickJS's JS_EVAL_FLAG_ASYNC: a global script may await
// at top level, and the eval returns a promise of {value}.
const asyncFlag = 1 << 7
