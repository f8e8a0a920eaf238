"""Audit models. The selection history itself is django-simple-history's table on Selection."""
