"""The experiment layer between the front ends (CLI, app, tune, sweep, case studies) and the
benchmark engine: what a variant is (:mod:`~fusionviz.experiment.variant`), its label
(:mod:`~fusionviz.experiment.labels`), the one builder (:mod:`~fusionviz.experiment.build`),
measuring each distinct variant once (:mod:`~fusionviz.experiment.run`) and running a benchmark
or a search in the background for the app (:mod:`~fusionviz.experiment.jobs`)."""
