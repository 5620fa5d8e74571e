.PHONY: demo test lint bench
demo:
	bash scripts/demo
test:
	bash scripts/test
lint:
	.venv/bin/ruff check src tests bench
	.venv/bin/mypy
bench:
	.venv/bin/python bench/run.py
