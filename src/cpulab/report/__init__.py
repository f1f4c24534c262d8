"""The present stage: a Summary drawn for people. `views.py` builds each table once into the
neutral table model of `tables.py`; `analysis_views.py` and
`machine_views.py` do the same for stored analyses and a cluster's machines; `terminal.py`
(rich), `html.py` (jinja2, with plots from `plots.py`) and `exports.py` (CSV, Markdown,
JSON) only draw them. Nothing here reads the store or runs a process."""
