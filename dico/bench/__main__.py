"""``python -m dico.bench ...``: the benchmark's command line (see ``dico.bench.benchmark``)."""
from dico.bench.benchmark import main

raise SystemExit(main())
