"""The chaos run's report: the faults survived and what the verification found."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class ChaosReport:
    """What the run survived and what the verification found."""

    faults: dict[str, int] = field(default_factory=dict)
    job_restarts: int = 0
    batches_committed: int = 0
    records_generated: int = 0
    records_checked: int = 0
    lost: int = 0
    duplicated: int = 0
    out_of_order: int = 0
    dead_letters_missing: int = 0
    wrong_final_tables: int = 0
    recovery_seconds_median: float | None = None
    recovery_seconds_max: float | None = None
    s3_requests_faulted: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0
    examples: list[str] = field(default_factory=list)

    @property
    def total_faults(self) -> int:
        """The number of faults injected, summed over every kind in :attr:`faults`."""
        return sum(self.faults.values())

    @property
    def ok(self) -> bool:
        """Whether the verification found nothing wrong: no record lost, duplicated or out
        of order, no dead letter missing and every final table as expected."""
        return not (self.lost or self.duplicated or self.out_of_order
                    or self.dead_letters_missing or self.wrong_final_tables)

    def as_dict(self) -> dict[str, Any]:
        """The report as a JSON-ready mapping.

        Returns
        -------
        dict
            Every field of the report, plus ``total_faults`` and ``ok``."""
        return {**asdict(self), "total_faults": self.total_faults, "ok": self.ok}

    def markdown(self) -> str:
        """The report as a short Markdown document: the faults, the restarts, the counts
        checked, what went wrong and the verdict, then the examples found.

        Returns
        -------
        str
            The document, ending with a newline."""
        lines = ["# Chaos run", "",
                 f"- faults survived: {self.total_faults} "
                 + ", ".join(f"{k} {v}" for k, v in sorted(self.faults.items())),
                 f"- job restarts from checkpoint: {self.job_restarts}",
                 f"- S3 requests faulted by the proxy: {self.s3_requests_faulted or 'none'}",
                 f"- batches committed: {self.batches_committed}",
                 f"- records generated: {self.records_generated}; changes checked: "
                 f"{self.records_checked}",
                 f"- lost {self.lost}, duplicated {self.duplicated}, out of order "
                 f"{self.out_of_order}, dead letters missing {self.dead_letters_missing}, "
                 f"wrong final tables {self.wrong_final_tables}",
                 f"- recovery (fault over to the next committed batch): median "
                 f"{self.recovery_seconds_median}s, max {self.recovery_seconds_max}s",
                 f"- wall time {self.seconds:.0f}s", f"- verdict: {'OK' if self.ok else 'FAILED'}"]
        lines += [f"  - {e}" for e in self.examples]
        return "\n".join(lines) + "\n"
