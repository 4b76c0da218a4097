package io.jetlake.sql;

import java.util.ArrayList;
import java.util.List;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.SparkSessionExtensions;
import org.apache.spark.sql.catalyst.analysis.UnresolvedRelation;
import org.apache.spark.sql.catalyst.analysis.UnresolvedTableOrView;
import org.apache.spark.sql.catalyst.catalog.SessionCatalog;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.rules.Rule;
import scala.collection.immutable.Seq;
import scala.jdk.javaapi.CollectionConverters;
import scala.runtime.AbstractFunction1;
import scala.runtime.BoxedUnit;

/**
 * Makes the SQL service's views visible to every session of its JVM by their bare names.
 *
 * <p>Spark Connect and the Thrift server give each client a session of its own, and a
 * temporary view lives in one session; a permanent view cannot hold the union of a Delta
 * version and a staged tail. The service registers each view as a global temporary view
 * instead, and this analyzer rule resolves a one-part name that is no temporary view of the
 * session (`ORDERS`, in a query or a DESCRIBE) to the global one (`global_temp.ORDERS`). Before it looks, it asks the
 * service to re-register the views (the {@link Refresher}), so a query sees every message
 * acknowledged before it started, and streams created or deleted since.
 */
public final class StreamViews extends AbstractFunction1<SparkSessionExtensions, BoxedUnit> {

  /**
   * The service's side: re-register the views (implemented in Python, called over py4j). A
   * query names the global views it reads, so that the service has the server show only those
   * streams' copies current; an empty list (a listing) stands for every stream.
   */
  public interface Refresher {
    void refresh(List<String> names);
  }

  private static volatile Refresher refresher;

  public static void setRefresher(Refresher r) {
    refresher = r;
  }

  /** Re-register the views now, for a plan that reads `names` (none: a listing's). */
  static void refresh(List<String> names) {
    Refresher r = refresher;
    if (r != null) {
      r.refresh(names);
    }
  }

  @Override
  public BoxedUnit apply(SparkSessionExtensions extensions) {
    extensions.injectResolutionRule(
        new AbstractFunction1<SparkSession, Rule<LogicalPlan>>() {
          @Override
          public Rule<LogicalPlan> apply(SparkSession session) {
            return new Resolve((org.apache.spark.sql.classic.SparkSession) session);
          }
        });
    extensions.injectPostHocResolutionRule(
        new AbstractFunction1<SparkSession, Rule<LogicalPlan>>() {
          @Override
          public Rule<LogicalPlan> apply(SparkSession session) {
            return new Listings(session);
          }
        });
    extensions.injectOptimizerRule(
        new AbstractFunction1<SparkSession, Rule<LogicalPlan>>() {
          @Override
          public Rule<LogicalPlan> apply(SparkSession session) {
            return new Listings.Kept();
          }
        });
    extensions.injectCheckRule(
        new AbstractFunction1<SparkSession, scala.Function1<LogicalPlan, BoxedUnit>>() {
          @Override
          public scala.Function1<LogicalPlan, BoxedUnit> apply(SparkSession session) {
            return AccountWalls.check(session);
          }
        });
    return BoxedUnit.UNIT;
  }

  static final class Resolve extends Rule<LogicalPlan> {
    private final org.apache.spark.sql.classic.SparkSession session;

    Resolve(org.apache.spark.sql.classic.SparkSession session) {
      this.session = session;
    }

    @Override
    public LogicalPlan apply(LogicalPlan plan) {
      if (plan.resolved()) {
        return plan;
      }
      Pass pass = new Pass(session.sessionState().catalog(), AccountWalls.account(session));
      List<String> names = new ArrayList<>();
      pass.collect(plan, names);
      if (!names.isEmpty()) {
        refresh(names);
      }
      return pass.rewrite(plan);
    }
  }

  /** The global view's name of an account's stream: its own name in the global account. */
  static String qualified(String account, String name) {
    return GLOBAL.equals(account) ? name : account + "." + name;
  }

  private static final String GLOBAL = "$G";

  /** The walks over one plan: the names it reads, then those names rewritten. */
  static final class Pass {
    private final SessionCatalog catalog;
    private final String account; // the session's (AccountWalls), null: unbound

    Pass(SessionCatalog catalog, String account) {
      this.catalog = catalog;
      this.account = account;
    }

    /** The global views' names the plan's unresolved relations would read, into `into`. */
    void collect(LogicalPlan plan, List<String> into) {
      if (plan.resolved()) {
        return;
      }
      Seq<String> parts = named(plan);
      if (parts != null) {
        String name = viewName(parts);
        if (name != null) {
          into.add(name);
        }
        return;
      }
      for (LogicalPlan child : CollectionConverters.asJava(plan.children())) {
        collect(child, into);
      }
    }

    LogicalPlan rewrite(LogicalPlan plan) {
      if (plan.resolved()) {
        return plan;
      }
      Seq<String> parts = named(plan);
      if (parts != null) {
        Seq<String> global = shared(parts);
        if (global == null) {
          return plan;
        }
        if (plan instanceof UnresolvedRelation relation) {
          return new UnresolvedRelation(global, relation.options(), relation.isStreaming());
        }
        UnresolvedTableOrView described = (UnresolvedTableOrView) plan;
        return described.copy(
            global,
            described.commandName(),
            described.allowTempView(),
            described.tableNotFoundSearchPathMode());
      }
      Pass pass = this;
      return plan.mapChildren(
          new AbstractFunction1<LogicalPlan, LogicalPlan>() {
            @Override
            public LogicalPlan apply(LogicalPlan child) {
              return pass.rewrite(child);
            }
          });
    }

    /**
     * The global view's name for a name that is one, or null. A bare name is a stream of the
     * session's account (the global account's when unbound) unless a temporary view has it;
     * `ACCOUNT.STREAM` names another account's stream, which only its own sessions and
     * unbound ones reach this way (the check rule refuses the rest by their files).
     */
    private Seq<String> shared(Seq<String> parts) {
      String name = viewName(parts);
      if (name == null || catalog.getGlobalTempView(name).isEmpty()) {
        return null;
      }
      return CollectionConverters.asScala(List.of(catalog.globalTempDatabase(), name)).toList();
    }

    /** The name a stream's view may answer: a relation's, or a DESCRIBE's; else null. */
    private static Seq<String> named(LogicalPlan plan) {
      if (plan instanceof UnresolvedRelation relation) {
        return relation.multipartIdentifier();
      }
      if (plan instanceof UnresolvedTableOrView described && described.allowTempView()) {
        return described.multipartIdentifier();
      }
      return null;
    }

    /** The global view a name would be, or null (a temporary view, another account's). */
    private String viewName(Seq<String> parts) {
      if (parts.size() == 1) {
        if (catalog.getTempView(parts.head()).isDefined()) {
          return null;
        }
        return qualified(account == null ? GLOBAL : account, parts.head());
      }
      if (parts.size() == 2 && (account == null || account.equals(parts.head()))) {
        return qualified(parts.head(), parts.last());
      }
      return null;
    }
  }
}
