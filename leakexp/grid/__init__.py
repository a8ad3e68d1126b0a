"""The configured grid: the stage registry and the runner of a configuration (``registry``), the grid's cells, their
artifacts, jobs and state (``work``), the overview that ``status``, ``plan`` and ``stages`` print (``overview``), and
what a configuration reads from outside (``fetch``). Between the command line and tables above and the stages below."""
