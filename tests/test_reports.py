"""Reports read only metrics.json / sweep.json; HTML is self-contained and escapes what users wrote."""
import json
import re

from loadtest.reporters import html, markdown


def test_run_html_is_self_contained_and_escaped(run_virtual_fn):
    m = run_virtual_fn({"name": "<script>alert(1)</script>", "backend": {"kind": "sim", "max_concurrency": 2},
                        "workload": {"input_tokens": 5, "output_tokens": 4},
                        "load": {"arrival": {"kind": "poisson", "rate": 20}, "duration": "5s"},
                        "sla": {"ttft_p50": "1s"}})
    page = html.run_html(json.loads(json.dumps(m)))
    assert "<script>" not in page and "&lt;script&gt;" in page
    assert not re.search(r"""(src|href)\s*=\s*['"]?(https?:)?//""", page)  # nothing fetched from a network
    assert page.count("src='data:image/png;base64,") == 2  # percentile plot + time series
    md = markdown.render(m)
    assert "<script>" not in md and "&lt;script&gt;" in md
