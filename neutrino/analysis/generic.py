"""Maps no built-in tool analyses: a user's own probe (a probe file or `-e` text).

Their meaning is the probe's, so the report shows what holds whatever the
fields mean (spec/analysis.md, "Maps of other probes"): for a `sum` map each
counter summed over the kernel's launches (exact integers, modulo 2^64 per
launch as the device adds them); for a `hist` map the samples counted; for an
`array` map each field's smallest and largest valid value. No rate, no
bandwidth: nothing is derived from a field's name.
"""

from __future__ import annotations

import attrs

from neutrino.analysis import _common as C


@attrs.define
class MapSummary:
    """One map of one kernel, over the kernel's launches."""

    map_type: str
    launches: int = 0
    records: int = 0
    sums: dict = attrs.Factory(dict)  # sum map: field -> summed counter
    samples: int = 0  # hist map: samples over every bucket
    lows: dict = attrs.Factory(dict)  # array map: field -> smallest valid value
    highs: dict = attrs.Factory(dict)  # array map: field -> largest valid value

    def add(self, md) -> None:
        """Fold one launch's map in (the array form streams its valid records in chunks)."""
        self.launches += 1
        kind = getattr(md, "type", "array")
        if kind == "sum":
            for field, value in md.totals().items():
                self.sums[field] = self.sums.get(field, 0) + int(value)
            return
        if kind == "hist":
            self.samples += int(md.histogram().total)
            return
        for records, _unit in C.iter_valid(md):
            self.records += len(records)
            for field in records.dtype.names or ():
                values = records[field]
                if len(values) == 0 or values.dtype.kind not in "iuf":
                    continue
                lo, hi = values.min().item(), values.max().item()
                self.lows[field] = lo if field not in self.lows else min(self.lows[field], lo)
                self.highs[field] = hi if field not in self.highs else max(self.highs[field], hi)

    def numbers(self) -> dict:
        """The table's quantities as numbers (for --format csv/json), keyed like the text columns."""
        if self.map_type == "sum":
            return dict(self.sums)
        if self.map_type == "hist":
            return {"samples": self.samples}
        out = {"records": self.records}
        for field in self.lows:
            out[f"{field}_min"], out[f"{field}_max"] = self.lows[field], self.highs[field]
        return out

    def columns(self) -> dict[str, str]:
        """The text row: sums and counts exact, ranges as `min..max`."""
        if self.map_type == "sum":
            return {f"{f} (sum)": str(v) for f, v in self.sums.items()}
        if self.map_type == "hist":
            return {"samples": str(self.samples)}
        row = {"records": str(self.records)}
        row.update({f: f"{_plain(self.lows[f])}..{_plain(self.highs[f])}" for f in self.lows})
        return row


def _plain(value) -> str:
    return f"{value:.6g}" if isinstance(value, float) else str(value)


def add_launch_map(summaries: dict, md) -> None:
    """Fold map `md` of one launch into `summaries` (map name -> MapSummary) of its kernel."""
    summary = summaries.get(md.name)
    if summary is None:
        summary = summaries[md.name] = MapSummary(getattr(md, "type", "array"))
    summary.add(md)


def tables(kernels) -> list[tuple[str, list[str], list[list[str]]]]:
    """(title, headers, rows) per map name, one row per kernel that wrote it.
    `kernels`: the report's KernelEntry values (their `generic` dicts)."""
    by_map: dict[str, list] = {}
    for entry in kernels:
        for name, summary in entry.generic.items():
            by_map.setdefault(name, []).append((entry.kernel, summary))
    out = []
    for name, rows in by_map.items():
        kind = rows[0][1].map_type
        headers = ["kernel", "launches"] + list(dict.fromkeys(c for _, s in rows for c in s.columns()))
        body = [[kernel, str(s.launches)] + [s.columns().get(h, "-") for h in headers[2:]] for kernel, s in rows]
        out.append((f"map {name} ({kind}; the probe's own map: no built-in analysis)", headers, body))
    return out


__all__ = ["MapSummary", "add_launch_map", "tables"]
