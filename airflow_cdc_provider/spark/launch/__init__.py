"""How a job reaches Spark from the Airflow side, without Airflow or Spark imports: the package archive and
the deploy target, the JVM class archive and the Python launcher that shorten a driver's start, and the
standalone master's REST API."""
