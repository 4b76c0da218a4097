package io.jetlake.sql;

import org.apache.spark.sql.AnalysisException;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.catalyst.ExtendedAnalysisException;

/**
 * What a walled session is told when its query fails: never a name or column of another
 * account's.
 *
 * <p>Spark reports a failed analysis with the plan as far as it got. Connect and JDBC send that
 * plan after the first line, and a column not found suggests the columns in scope; a query that
 * names another account's view ({@code SELECT nosuch FROM global_temp.`b.secret`}) fails on the
 * column before the wall's check runs, so Spark's own error would name the view's columns. Every
 * door passes its errors through {@link #clean}: an error whose plan reaches anything the
 * session's account may not read is replaced by the wall's own error for it (as if the view did
 * not exist, or "may not read"), which carries no plan.
 */
public final class WalledErrors {
  private WalledErrors() {}

  /** The error to tell the session in place of {@code error} (itself when nothing is hidden). */
  public static Throwable clean(SparkSession session, Throwable error) {
    for (Throwable t = error; t != null; t = t.getCause()) {
      if (t instanceof ExtendedAnalysisException found && found.plan().isDefined()) {
        try {
          AccountWalls.expose(session, found.plan().get());
        } catch (Exception wall) { // Spark's AnalysisException, which Java takes for checked
          if (wall instanceof AnalysisException) {
            return wall;
          }
          throw wall;
        }
        return error;
      }
      if (t.getCause() == t) {
        break;
      }
    }
    return error;
  }

  /** The first line of the cleaned error's message: SQL over NATS's error text. */
  public static String firstLine(SparkSession session, Throwable error) {
    Throwable cleaned = clean(session, error);
    String text = cleaned.getMessage() == null ? cleaned.toString() : cleaned.getMessage();
    int plan = text.indexOf(";\n");
    return (plan < 0 ? text : text.substring(0, plan)).strip();
  }
}
