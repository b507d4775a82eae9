"""Reads a Perfetto trace with Perfetto's own protos (the `perfetto` pip package) and prints
what spacetime's tests compare with the JSON report, as one JSON object: the clock snapshot,
the packet defaults, the process and thread descriptors, the process tree and event counts.

Usage: check_perfetto.py TRACE"""
import json
import sys

from google.protobuf import unknown_fields
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb


def unknown(msg):
    return len(unknown_fields.UnknownFieldSet(msg))


trace = pb.Trace()
with open(sys.argv[1], "rb") as f:
    trace.ParseFromString(f.read())

out = {
    "clocks": [],
    "default_clock": None,
    "processes": [],
    "threads": [],
    "tree": [],
    "track_events": 0,
    "sequences": sorted({p.trusted_packet_sequence_id for p in trace.packet}),
    "unknown_fields": 0,
    # Double-valued counter tracks: name -> [[ts, value], ...] (the CPU counter).
    "double_counters": {},
    # Unsigned debug annotations of the slices: name -> [value, ...].
    "uint_annotations": {},
}
names = {}
for p in trace.packet:
    # Fields the protos do not know would mean a wrong field number.
    out["unknown_fields"] += unknown(p)
    if p.HasField("clock_snapshot"):
        out["clocks"] += [[c.clock_id, c.timestamp] for c in p.clock_snapshot.clocks]
    if p.HasField("trace_packet_defaults"):
        out["default_clock"] = p.trace_packet_defaults.timestamp_clock_id
    if p.HasField("track_descriptor"):
        d = p.track_descriptor
        out["unknown_fields"] += unknown(d)
        names[d.uuid] = (d.name, d.counter.unit_name if d.HasField("counter") else None)
        if d.HasField("process"):
            out["processes"].append(
                {"uuid": d.uuid, "pid": d.process.pid, "name": d.process.process_name,
                 "cmdline": list(d.process.cmdline)})
        if d.HasField("thread"):
            out["threads"].append(
                {"uuid": d.uuid, "pid": d.thread.pid, "tid": d.thread.tid,
                 "name": d.thread.thread_name})
    if p.HasField("process_tree"):
        out["tree"] += [{"pid": q.pid, "ppid": q.ppid, "cmdline": list(q.cmdline)}
                        for q in p.process_tree.processes]
    if p.HasField("track_event"):
        out["track_events"] += 1
        e = p.track_event
        for a in e.debug_annotations:
            if a.HasField("uint_value"):
                out["uint_annotations"].setdefault(a.name, []).append(a.uint_value)
        if e.HasField("double_counter_value"):
            name, unit = names.get(e.track_uuid, ("?", None))
            c = out["double_counters"].setdefault(name, {"unit": unit, "points": []})
            c["points"].append([p.timestamp, e.double_counter_value])
print(json.dumps(out))
