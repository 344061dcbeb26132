"""One run as typed pieces: :mod:`~cselab.run.spec` reads the config once (:class:`RunSpec`),
:mod:`~cselab.run.resume`, :mod:`~cselab.run.inputs`, :mod:`~cselab.run.assemble`, :mod:`~cselab.run.flow`,
:mod:`~cselab.run.results` and :mod:`~cselab.run.failure` take its pieces (docs/architecture.md)."""
