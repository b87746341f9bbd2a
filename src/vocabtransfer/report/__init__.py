"""The study report: results read back, statistics tables, figures, the verdict, report.md."""
