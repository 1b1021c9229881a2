//! A reservation timeline drawn as a text Gantt chart.
