package io.jetlake.sql;

import java.util.Collections;
import java.util.HashMap;
import java.util.HashSet;
import java.util.Locale;
import java.util.Map;
import java.util.Set;
import java.util.WeakHashMap;
import org.apache.hadoop.fs.Path;
import org.apache.spark.sql.AnalysisException;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.catalyst.TableIdentifier;
import org.apache.spark.sql.catalyst.analysis.ResolvedNamespace;
import org.apache.spark.sql.catalyst.analysis.ResolvedTempView;
import org.apache.spark.sql.catalyst.expressions.CallMethodViaReflection;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.UserDefinedExpression;
import org.apache.spark.sql.catalyst.plans.logical.CTERelationRef;
import org.apache.spark.sql.catalyst.plans.logical.Command;
import org.apache.spark.sql.catalyst.plans.logical.CommandResult;
import org.apache.spark.sql.catalyst.plans.logical.DeserializeToObject;
import org.apache.spark.sql.catalyst.plans.logical.LocalRelation;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.plans.logical.ObjectConsumer;
import org.apache.spark.sql.catalyst.plans.logical.ObjectProducer;
import org.apache.spark.sql.catalyst.plans.logical.OneRowRelation;
import org.apache.spark.sql.catalyst.plans.logical.Range;
import org.apache.spark.sql.catalyst.plans.logical.ScriptTransformation;
import org.apache.spark.sql.catalyst.plans.logical.SerializeFromObject;
import org.apache.spark.sql.catalyst.plans.logical.SetCatalogAndNamespace;
import org.apache.spark.sql.catalyst.plans.logical.TypedFilter;
import org.apache.spark.sql.catalyst.plans.logical.View;
import org.apache.spark.sql.execution.LogicalRDD;
import org.apache.spark.sql.execution.command.DescribeColumnCommand;
import org.apache.spark.sql.execution.command.DescribeTableCommand;
import org.apache.spark.sql.execution.command.ShowColumnsCommand;
import org.apache.spark.sql.execution.command.SetNamespaceCommand;
import org.apache.spark.sql.execution.datasources.HadoopFsRelation;
import org.apache.spark.sql.execution.datasources.LogicalRelation;
import scala.jdk.javaapi.CollectionConverters;
import scala.runtime.AbstractFunction1;
import scala.runtime.BoxedUnit;

/**
 * Keeps a session bound to an account inside that account's streams.
 *
 * <p>A session the SQL service binds ({@link #bind}) may read only the files its account's
 * own views read: the check runs on the analyzed plan, where a bare name, a {@code
 * global_temp} view and a path read ({@code delta.`/lake/...`}, {@code parquet.`...`}) all
 * end as the same kind of leaf, a scan of files under root paths. A wall on names alone would
 * leave paths open, and one on paths alone would leave views (which expand to their files)
 * open; one on the files closes both. Anything that reads other than files of the account's
 * views is refused: another account's views whatever they read, other relations (JDBC, Hive
 * tables, cached plans), commands ({@code SET}, {@code CREATE}, {@code ADD JAR}; a {@code
 * DESCRIBE} of its own view is let through), scripts
 * ({@code TRANSFORM ... USING}), {@code reflect}/{@code java_method} and user-defined
 * functions and typed closures (Python or JVM code a client sent), which run code in the
 * service. Its listings ({@code SHOW TABLES}, {@code SHOW DATABASES}, the catalog API) name its
 * own views only ({@link Listings}), and another account's view is refused as an unknown name
 * is, by a view or a {@code DESCRIBE} alike: no error tells that it exists. A session bound to
 * all accounts (the system account's) is not checked. With logins
 * on ({@link NatsLogins}) a session bound to none is refused every query: each door binds its
 * sessions (Connect's and NATS's as they open, JDBC's on its first query, {@link JdbcDoor});
 * with logins off it reads all, as on a server without accounts.
 */
public final class AccountWalls {
  private static final Map<SparkSession, String> BOUND =
      Collections.synchronizedMap(new WeakHashMap<>());
  private static final String GLOBAL_TEMP = "global_temp";
  /**
   * Commands a BI tool runs as it connects (DBeaver, Superset), which name the engine's parts
   * and no account's: the catalogs ({@code spark_catalog}), the functions (built in, and the
   * session's own), the current namespace.
   */
  private static final Set<String> ENGINE_LISTINGS =
      Set.of(
          "ShowCatalogsCommand",
          "ShowFunctionsCommand",
          "DescribeFunctionCommand",
          "ShowCurrentNamespaceCommand");
  private static final String ALL = new String("*all accounts*"); // compared by identity
  private static volatile Map<String, Set<String>> roots = Map.of();
  private static Map<String, Set<String>> current = Map.of(); // the last rebuild's alone

  private AccountWalls() {}

  /** Binds a session to an account: it sees that account's views and files only. */
  public static void bind(SparkSession session, String account) {
    BOUND.put(session, account);
  }

  /** Binds a session to every account (the system account's): it sees all, unchecked. */
  public static void bindAll(SparkSession session) {
    BOUND.put(session, ALL);
  }

  /**
   * Binds a session to an account (null: all) unless it is bound already; then the account it
   * is bound to when that is another ("all accounts" for the system's), else null.
   */
  static synchronized String claim(SparkSession session, String account) {
    String wanted = account == null ? ALL : account;
    String owner = BOUND.putIfAbsent(session, wanted);
    if (owner == null || owner == wanted) {
      return null;
    }
    if (owner != ALL && wanted != ALL && owner.equals(wanted)) {
      return null;
    }
    return owner == ALL ? "the system" : owner;
  }

  /** The account a session is bound to, or null: bound to all, or (logins off) to none. */
  public static String account(SparkSession session) {
    String bound = bound(session);
    return bound == ALL ? null : bound;
  }

  /** What a session is bound to: an account, ALL, or null; a JDBC session is bound here. */
  private static String bound(SparkSession session) {
    String bound = BOUND.get(session);
    if (bound == null && NatsLogins.on()) {
      NatsLogins.Login login = JdbcDoor.accountOf(session);
      if (login != null) {
        claim(session, login.system() ? null : login.account());
        bound = BOUND.get(session);
      }
    }
    return bound;
  }

  /**
   * Sets every account's readable roots from the analyzed plans of its views, as the service
   * rebuilt them. The previous rebuild's roots stay too: a query that resolved a view just
   * before the rebuild replaced it is checked after, against the files that view read.
   */
  public static synchronized void allow(Map<String, java.util.List<LogicalPlan>> views) {
    Map<String, Set<String>> found = new HashMap<>();
    for (Map.Entry<String, java.util.List<LogicalPlan>> e : views.entrySet()) {
      Set<String> paths = new HashSet<>();
      for (LogicalPlan plan : e.getValue()) {
        collectRoots(plan, paths);
      }
      found.put(e.getKey(), paths);
    }
    Map<String, Set<String>> both = new HashMap<>();
    for (Map.Entry<String, Set<String>> e : found.entrySet()) {
      Set<String> paths = new HashSet<>(e.getValue());
      paths.addAll(current.getOrDefault(e.getKey(), Set.of()));
      both.put(e.getKey(), Set.copyOf(paths));
    }
    current = found;
    roots = Map.copyOf(both);
  }

  private static void collectRoots(LogicalPlan plan, Set<String> into) {
    if (plan instanceof LogicalRelation lr && lr.relation() instanceof HadoopFsRelation fs) {
      for (Path p : CollectionConverters.asJava(fs.location().rootPaths())) {
        into.add(p.toString());
      }
    }
    for (LogicalPlan child : CollectionConverters.asJava(plan.children())) {
      collectRoots(child, into);
    }
  }

  /** The check rule Spark runs on every analyzed plan of a session. */
  static AbstractFunction1<LogicalPlan, BoxedUnit> check(SparkSession session) {
    return new AbstractFunction1<>() {
      @Override
      public BoxedUnit apply(LogicalPlan plan) {
        if (plan instanceof SetNamespaceCommand || plan instanceof SetCatalogAndNamespace) {
          return BoxedUnit.UNIT; // USE: harmless, and JDBC's runs before its session is known
        }
        String account = bound(session);
        if (account == null && NatsLogins.on()) {
          throw error("a session of no login may not query: " + NatsLogins.NO_LOGIN);
        }
        if (account != null && account != ALL) {
          walk(plan, account, roots.getOrDefault(account, Set.of()), searchPath(session));
        }
        return BoxedUnit.UNIT;
      }
    };
  }

  private static void walk(
      LogicalPlan plan, String account, Set<String> allowed, String searchPath) {
    if (Listings.walled(plan, account)) { // a listing of its own views only
      return;
    }
    if (named(plan, account, searchPath)) {
      return; // a DESCRIBE or a catalog look-up of its own: names and types, no rows
    }
    if (ENGINE_LISTINGS.contains(plan.nodeName())) {
      return;
    }
    if (plan instanceof Command) {
      throw refused(account, "runs queries only, not " + plan.nodeName());
    }
    if (plan instanceof ScriptTransformation) {
      throw refused(account, "may not run scripts (TRANSFORM ... USING)");
    }
    if ((plan instanceof ObjectProducer
            || plan instanceof ObjectConsumer
            || plan instanceof TypedFilter)
        && !(plan instanceof DeserializeToObject || plan instanceof SerializeFromObject)) {
      throw refused(account, "may not run typed closures (" + plan.nodeName() + ")");
    }
    for (Expression e : CollectionConverters.asJava(plan.expressions())) {
      reflection(e, account);
    }
    if (plan.children().isEmpty()) {
      leaf(plan, account, allowed);
    }
    for (LogicalPlan child : CollectionConverters.asJava(plan.children())) {
      walk(child, account, allowed, searchPath);
    }
    for (LogicalPlan sub : CollectionConverters.asJava(plan.subqueries())) {
      walk(sub, account, allowed, searchPath);
    }
  }

  /**
   * Throws for a name of another account's in a plan node (a DESCRIBE, a catalog look-up, a
   * view); true when the node is a DESCRIBE or look-up of the account's own, which reads no rows.
   */
  private static boolean named(LogicalPlan plan, String account, String searchPath) {
    TableIdentifier described =
        plan instanceof DescribeTableCommand d
            ? d.table()
            : plan instanceof DescribeColumnCommand c
                ? c.table()
                : plan instanceof ShowColumnsCommand s ? s.tableName() : null;
    if (described != null) { // names and types, no rows: of its own views only
      if (ownGlobal(account, described)) {
        return true;
      }
      throw notFound(described.quotedString(), searchPath);
    }
    if (plan instanceof ResolvedTempView named) { // a catalog look-up: no rows either
      String[] namespace = named.identifier().namespace();
      if (namespace.length == 0 || own(account, named.identifier().name())) {
        return true;
      }
      String name = "`" + String.join("`.`", namespace) + "`.`" + named.identifier().name() + "`";
      throw notFound(name, searchPath);
    }
    // A view's rows may be no files at all (a tail sent to a cluster as rows): a temporary
    // view is the account's own or refused, whatever it reads.
    if (plan instanceof View view && view.isTempView()) {
      String name = view.desc().identifier().table();
      if (!own(account, name)) { // named as the catalog keeps it, as a listing shows it
        String database = view.desc().identifier().database().getOrElse(() -> GLOBAL_TEMP);
        throw notFound(
            "`" + database + "`.`" + name.toLowerCase(Locale.ROOT) + "`", searchPath);
      }
    }
    return false;
  }

  /**
   * Throws the error the check gives for the first part of a plan the session's account may
   * not see, if any; nothing for a session bound to all (or none).
   *
   * <p>Spark reports a failed analysis with the plan as far as it got, and some errors read
   * that plan: a column not found lists the columns in scope as suggestions, and Connect and
   * JDBC send the plan itself. A query naming another account's view fails its analysis on a
   * column before the check runs, so its error would name that view's columns; {@link
   * WalledErrors} asks here first and tells the client this error in its place.
   */
  static void expose(SparkSession session, LogicalPlan plan) {
    String account = account(session);
    if (account != null) {
      exposeIn(plan, account, roots.getOrDefault(account, Set.of()), searchPath(session));
    }
  }

  private static void exposeIn(
      LogicalPlan plan, String account, Set<String> allowed, String searchPath) {
    named(plan, account, searchPath);
    if (plan.children().isEmpty() && plan.resolved() && !(plan instanceof Command)) {
      leaf(plan, account, allowed); // unresolved leaves are names as the client wrote them
    }
    for (LogicalPlan child : CollectionConverters.asJava(plan.children())) {
      exposeIn(child, account, allowed, searchPath);
    }
    for (LogicalPlan sub : CollectionConverters.asJava(plan.subqueries())) {
      exposeIn(sub, account, allowed, searchPath);
    }
  }

  /** Whether a global view is one of the account's (stream names hold no dot). */
  static boolean own(String account, String view) {
    String prefix = StreamViews.qualified(account, "").toLowerCase(Locale.ROOT);
    String name = view.toLowerCase(Locale.ROOT); // the catalog keeps names in lower case
    return name.startsWith(prefix) && name.indexOf('.', prefix.length()) < 0;
  }

  private static boolean ownGlobal(String account, TableIdentifier table) {
    return table.database().contains(GLOBAL_TEMP) && own(account, table.table());
  }

  private static void leaf(LogicalPlan plan, String account, Set<String> allowed) {
    if (plan instanceof LocalRelation
        || plan instanceof ResolvedNamespace // a catalog look-up of a namespace: no rows
        || plan instanceof Range
        || plan instanceof OneRowRelation
        || plan instanceof CTERelationRef
        || plan instanceof LogicalRDD
        || plan instanceof CommandResult) { // the rows of a command that passed as it ran
      return;
    }
    if (plan instanceof LogicalRelation lr && lr.relation() instanceof HadoopFsRelation fs) {
      for (Path p : CollectionConverters.asJava(fs.location().rootPaths())) {
        if (!allowed.contains(p.toString())) {
          throw refused(account, "may not read " + p + ": it is no stream of the account");
        }
      }
      return;
    }
    throw refused(account, "may not read " + plan.nodeName() + ": it is no stream of the account");
  }

  private static void reflection(Expression e, String account) {
    if (e instanceof CallMethodViaReflection) {
      throw refused(account, "may not call reflect/java_method");
    }
    if (e instanceof UserDefinedExpression) {
      throw refused(account, "may not run user-defined functions (" + e.prettyName() + ")");
    }
    for (Expression child : CollectionConverters.asJava(e.children())) {
      reflection(child, account);
    }
  }

  /** An AnalysisException, as Spark's own analysis errors are (clients report it as one). */
  private static RuntimeException refused(String account, String what) {
    return error("account " + account + " " + what);
  }

  /**
   * Another account's view is refused as Spark refuses a name it does not know, so an error
   * tells no more of its existence than a listing does.
   */
  private static RuntimeException notFound(String name, String searchPath) {
    return unchecked(
        new AnalysisException(
            "TABLE_OR_VIEW_NOT_FOUND",
            new scala.collection.immutable.Map.Map2<>(
                "relationName", name, "searchPath", searchPath)));
  }

  /** The search path Spark's own "cannot be found" names: the session's current namespace. */
  private static String searchPath(SparkSession session) {
    String current = "`" + session.catalog().currentCatalog() + "`.`"
        + session.catalog().currentDatabase() + "`";
    return "[`system`.`builtin`, `system`.`session`, " + current + "]";
  }

  private static RuntimeException error(String text) {
    return unchecked(
        new AnalysisException(
            "_LEGACY_ERROR_USER_RAISED_EXCEPTION",
            new scala.collection.immutable.Map.Map1<>("errorMessage", text)));
  }

  /** Scala's exceptions are unchecked; Java's compiler takes AnalysisException (and Hive's
   *  HiveSQLException, which Scala methods throw undeclared) for checked. */
  @SuppressWarnings("unchecked")
  static <T extends Throwable> RuntimeException unchecked(Throwable t) throws T {
    throw (T) t;
  }
}
