"""What every model kind's engine thread shares: the messages that cross into it
(``protocol``) and the thread that runs them (``thread``)."""
