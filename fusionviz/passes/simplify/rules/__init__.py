"""fusionviz's own rewrite rules for the simplification passes, one rule per module.

Each is a class in onnxscript's pattern language (pattern + check + rewrite); a check that
fails returns a reason. Rules that remove a node return ``x`` itself (:class:`NoOpRule`); the
pass's cleanup then bypasses the Identity that stands for it.
"""
