"""Reports: run folders -> one pandas DataFrame (one row per run), PNG plots and report.md.

Public API::

    from twinserve.experiments.report import build_frame, build_report, load_runs, SLO
    df = build_frame(["multirun/2025-01-01/12-00-00"], slo=SLO(ttft_ms=2000, tpot_ms=100))
    rep = build_report(["multirun/..."], "report_out")      # what `twinserve-report` does

Modules: ``runs`` (find/read run folders), ``frame`` (the runs table), ``latency`` (per-request
TTFT/TPOT, SLOs), ``fidelity`` (sim-vs-engine pairs), ``plot_*`` (one plot kind each, registered
in ``plotting.PLOTS``), ``render`` (run the plots), ``markdown`` (report.md), ``cli``.
"""

from twinserve.experiments.report.cli import Report, build_report
from twinserve.experiments.report.fidelity import fidelity_summary, fidelity_table
from twinserve.experiments.report.frame import build_frame, runs_frame
from twinserve.experiments.report.latency import SLO, request_latencies, slo_attainment
from twinserve.experiments.report.markdown import headline_table, markdown_table, write_report
from twinserve.experiments.report.render import make_context, make_plots
from twinserve.experiments.report.runs import RunFolder, find_runs, load_runs

__all__ = [
    "Report", "RunFolder", "SLO", "build_frame", "build_report", "fidelity_summary",
    "fidelity_table", "find_runs", "headline_table", "load_runs", "make_context", "make_plots",
    "markdown_table", "request_latencies", "runs_frame", "slo_attainment", "write_report",
]
