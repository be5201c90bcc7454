"""Airflow operators of the CDC pipeline (thin: the work is in core/, mysql/, spark/ and watermarks.py)."""
