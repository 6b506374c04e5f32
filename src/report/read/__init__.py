"""Reading: the experiment's runs from MLflow (`runs`), the per-variant table (`table`), which code made
them (`provenance`), and what the study published (`published`). No verdict is decided here."""
