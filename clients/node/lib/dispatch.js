// Ordered dispatch: a chain's messages one after another, and the copies ksidecar took back dropped.
'use strict';
// The Subscriber opens its streams with ordered_batches, so ksidecar sends several records
// of one ordering chain (a key of a partition, or a partition: Record.ordering_chain) at
// once, in offset order, and the library promises to process them in that order. A chain
// here is (topic, partition, ordering_chain); records in no chain (ordering_chain 0) never
// come here. The design is the Go client's (clients/go/dispatch.go), on the event loop:
// - serial (the 'message' event form): a chain hands out its next message once the one
//   before was settled (ack or nack) and its handler returned (its promise settled);
//   different chains run side by side, each a serial queue;
// - not serial (the async iterator): messages are yielded in the order delivered; the
//   chain only tracks what is not yet yielded, so that it can be dropped.
// When a record is nacked, its lease runs out or its stream ends, ksidecar takes back every
// later record of the chain it had sent and sends them again after it. The dispatcher drops
// their copies not yet handed out (no handler call, no ack; hooks.drop gives back what they
// held): on a nack at once; on an expiry when the chain comes again at or below an offset
// already received; on a lost stream in purge(). After a nack, records of the chain that
// still arrive on the same stream above the nacked one, until the nack's result comes, are
// such copies too (batches ksidecar made before it read the nack): the nack is a fence.
// ksidecar sends a request's results in turn after the batches it delivered before them
// (ks_substream_defer), so once the result is here, what follows is fresh.
//
// @locality the Node event loop (no locks)

/** What the dispatcher knows of one chain. */
class Chain {
  constructor(key) {
    this.key = key;
    this.q = []; // received, not yet handed out, in offset order, from index head on
    this.head = 0;
    this.out = null; // handed out (serial), not yet both settled and returned
    this.ready = false; // in the ready list
    this.top = -1; // offset of the last record received
    this.fence = null; // a nack whose result has not come (see above)
  }

  get size() {
    return this.q.length - this.head;
  }

  shift() {
    if (this.head >= this.q.length) return null;
    const m = this.q[this.head];
    this.q[this.head++] = null;
    if (this.head === this.q.length) {
      this.q = [];
      this.head = 0;
    } else if (this.head > 256 && this.head * 2 > this.q.length) {
      this.q = this.q.slice(this.head);
      this.head = 0;
    }
    return m;
  }

  // Takes the queued messages with offset >= off off the queue; returns them.
  cutFrom(off) {
    let i = this.q.length;
    while (i > this.head && this.q[i - 1].offset >= off) i--;
    return this.q.splice(i);
  }

  // Takes the queued messages for which pred holds off the queue; returns them.
  cutIf(pred) {
    const keep = [];
    const cut = [];
    for (let i = this.head; i < this.q.length; i++) (pred(this.q[i]) ? cut : keep).push(this.q[i]);
    this.q = keep;
    this.head = 0;
    return cut;
  }
}

class Dispatcher {
  /**
   * serial: true for the handler form, false for the iterator.
   * hooks.run(m): calls the handler on m (serial only); whoever calls it calls returned(m)
   *   once the handler has returned (or its promise settled).
   * hooks.drop(m): ends m, never handed out: marks it settled and gives back what it held.
   */
  constructor(serial, hooks) {
    this.serial = serial;
    this.hooks = hooks;
    this.chains = new Map(); // chains with messages queued, out, or fenced
    this.ready = []; // chains with a message to hand out and none out (serial)
    this.rhead = 0;
    this.pumping = false;
    this.kicked = false;
    this.stopped = false; // closing: nothing more is handed out
    this.dropped = 0;
  }

  static keyOf(m) {
    return `${m.topic}\0${m.partition}\0${m._chain}`;
  }

  /**
   * Takes a received message of a chain (m._chain not 0). Returns false when it is a copy
   * ksidecar takes back (dropped), true when it was queued.
   */
  add(m) {
    const k = Dispatcher.keyOf(m);
    let c = this.chains.get(k);
    if (!c) this.chains.set(k, (c = new Chain(k)));
    m._ch = c;
    const f = c.fence;
    if (f) {
      if (m._gen === f._gen && m.offset > f.offset) {
        c.top = m.offset;
        this._drop(m);
        return false;
      }
      c.fence = null; // the nacked record came again: the chain goes on from it
    }
    // ksidecar went back on the chain (an expired lease): the queued copies at or above
    // this offset are stale; it sends them again after this one.
    if (m.offset <= c.top) this._dropAll(c.cutFrom(m.offset));
    c.top = m.offset;
    c.q.push(m);
    if (this.serial && !c.out && !c.ready) this._schedule(c);
    return true;
  }

  /** Hands out what is ready (serial): the caller's turn, after add()s. */
  pump() {
    if (this.pumping) return;
    this.pumping = true;
    try {
      while (this.rhead < this.ready.length && !this.stopped) {
        const c = this.ready[this.rhead];
        this.ready[this.rhead++] = null;
        c.ready = false;
        const m = c.shift();
        if (!m) {
          this._forget(c);
          continue;
        }
        c.out = m;
        m._returned = false;
        this.hooks.run(m); // may settle and return at once: its chain is then ready again
      }
      if (this.rhead === this.ready.length) {
        this.ready = [];
        this.rhead = 0;
      }
    } finally {
      this.pumping = false;
    }
  }

  /** The iterator yields m (not serial): it leaves its chain's queue. */
  taken(m) {
    const c = m._ch;
    if (c.size && c.q[c.head] === m) c.shift();
    else c.cutIf((x) => x === m); // not expected: the queue is in delivery order
    this._forget(c);
  }

  /** m's handler returned (serial). */
  returned(m) {
    m._returned = true;
    if (m._settled) this._finish(m);
  }

  /**
   * m (of a chain) was settled for the first time. nack: a nack sent on m's live stream,
   * after which ksidecar takes back the chain's later records.
   */
  settled(m, nack) {
    if (nack) {
      const c = this._live(m);
      this._dropAll(c.cutFrom(m.offset + 1));
      c.fence = m;
    }
    if (m._returned) this._finish(m);
  }

  /** The result of the nack of m came: the chain's records that arrive from now on are fresh. */
  nackAnswered(m) {
    const c = m._ch && this.chains.get(m._ch.key);
    if (c && c.fence === m) {
      c.fence = null;
      this._forget(c);
    }
  }

  /**
   * The stream gen ended, and its leases with it: drops what its chains hold not yet
   * handed out and lifts its fences. A message out keeps its chain until it is done.
   */
  purge(gen) {
    for (const c of this.chains.values()) {
      if (c.size) this._dropAll(c.cutIf((m) => m._gen === gen));
      if (c.fence && c.fence._gen === gen) c.fence = null;
      this._forget(c);
    }
  }

  /** Stops handing out (the subscriber is closing). */
  stop() {
    this.stopped = true;
  }

  // m's chain as the map has it: a chain left empty was forgotten while m was out of it
  // (the iterator yielded it), and a new record of the key may have made a new one since.
  _live(m) {
    let c = this.chains.get(m._ch.key);
    if (!c) this.chains.set(m._ch.key, (c = m._ch));
    return c;
  }

  _finish(m) {
    const c = m._ch;
    if (c.out !== m) return;
    c.out = null;
    m._returned = false;
    if (c.size) {
      this._schedule(c);
      this._kick();
    } else this._forget(c);
  }

  _schedule(c) {
    c.ready = true;
    this.ready.push(c);
  }

  // Pumps soon (in a microtask), so that the next handler does not start inside the ack()
  // call that ended the one before; inside a pump, the pump goes on with it.
  _kick() {
    if (this.pumping || this.kicked) return;
    this.kicked = true;
    queueMicrotask(() => {
      this.kicked = false;
      this.pump();
    });
  }

  _drop(m) {
    this.dropped++;
    this.hooks.drop(m);
  }

  _dropAll(ms) {
    for (const m of ms) this._drop(m);
  }

  // Deletes c when nothing of it is left, so that the map does not grow with every key seen.
  _forget(c) {
    if (!c.out && !c.ready && !c.size && !c.fence) this.chains.delete(c.key);
  }
}

module.exports = { Dispatcher };
