"""MSCCL++ execution plans (microsoft/mscclpp): reading, translating to the IR, writing.

* :mod:`.rules` - what MSCCL++'s plan parser and executor require of a plan, as a table;
* :mod:`.plan` - the model of a plan and its reader (every rule checked, one line per
  failure naming the field);
* :mod:`.translate` - a plan as an :class:`~arborcc.ir.model.Algorithm`, where the
  one-sided operations map onto sends and receives;
* :mod:`.writer` - an Algorithm as a plan (puts into the peer's scratch with signal/wait
  and semaphore credits, or LL packets);
* :mod:`.races` - races in a plan's own semantics (a put landing where a peer still reads);
* :mod:`.deadlock` - deadlock in a plan's own semantics (a wait, acquire, barrier or packet
  read nothing can release).

See ``docs/mscclpp.md``.
"""
